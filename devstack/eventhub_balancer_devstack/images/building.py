"""Build the images of docker/ into one OCI layout, with the slow parts cached as tags there.

The cache is the layout itself: the Debian base (`cache-base-KEY`) and each RUN of a final stage
that comes before the virtualenv (the consumer's Java runtime, `cache-KEY`) are tagged images,
keyed by a hash of everything that made them. A second build unpacks the last cached one and
builds only the virtualenv and what follows it. `--refresh` drops the cache: the next build
takes Debian's packages (security updates included) afresh.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from eventhub_balancer_devstack.images import chroots, layouts, overlays, recipes

#: The images `make images` builds, by short name; the others are built when named.
DOCKERFILES = {
    "operator": Path("docker") / "operator.Dockerfile",
    "consumer": Path("docker") / "consumer.Dockerfile",
    "consumer-connect": Path("docker") / "consumer-connect.Dockerfile",
    "orders-example": Path("examples") / "orders" / "Dockerfile",
}
DEFAULT_IMAGES = ("operator", "consumer")
#: The build context a Dockerfile's COPY sees leaves these out (.dockerignore's rules for them).
CONTEXT_IGNORED = ("__pycache__", "*.pyc", "*.egg-info")
#: `pip wheel` of the consumer's dependencies (pyspark is a 450 MB download when not cached).
PIP_TIMEOUT_SECONDS = 1800
CACHE_PREFIX = "cache-"


@dataclasses.dataclass(frozen=True)
class Workspace:
    """The repository, and `.images/` beside it for everything the builds write."""

    root: Path

    @property
    def folder(self) -> Path:
        return self.root / ".images"

    @property
    def layout(self) -> layouts.Layout:
        return layouts.Layout(self.folder / "oci")

    @property
    def log(self) -> Path:
        return self.folder / "build.log"

    @property
    def record(self) -> Path:
        return self.folder / "images.json"

    def kept_rootfs(self, tag: str) -> Path:
        """The unpacked root filesystem of a cached image, kept as the lower side of the overlay
        each build puts its last layer on (an unpack of the consumer takes a minute)."""
        return self.folder / "rootfs" / tag

    def prune(self, tags: set[str]) -> None:
        """Kept root filesystems whose image is no longer cached (--refresh, a changed RUN)."""
        folder = self.folder / "rootfs"
        for kept in folder.iterdir() if folder.is_dir() else ():
            if kept.name not in tags:
                shutil.rmtree(kept)

    def scratch(self, name: str) -> Path:
        """An empty folder for one build's bundle, context and wheels."""
        path = self.folder / "work" / name
        if os.path.ismount(path / "merged"):  # an earlier build was stopped inside its overlay
            subprocess.run(["umount", str(path / "merged")], check=True)
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path


@dataclasses.dataclass(frozen=True, kw_only=True)
class Built:
    image: layouts.Image
    unpacked_bytes: int
    seconds: float


def base(workspace: Workspace, *, refresh: bool) -> tuple[str, str]:
    """The tag and cache key of the Debian base, built by debootstrap unless cached."""
    layout = workspace.layout
    layout.ensure()
    if refresh:
        for tag in sorted(t for t in layout.tags() if t.startswith(CACHE_PREFIX)):
            layout.remove(tag)
    key = _key(
        chroots.SUITE,
        chroots.VARIANT,
        chroots.BASE_SETUP,
        chroots.SLIM_EXCLUDES,
        chroots.SLIM_EXISTING,
        os.environ.get(chroots.MIRROR_VARIABLE, ""),
        os.environ.get(chroots.SECURITY_MIRROR_VARIABLE, ""),
        recipes.BASE_ENV,
    )
    tag = f"{CACHE_PREFIX}base-{key}"
    if tag in layout.tags():
        return tag, key
    scratch = workspace.scratch("base")
    layout.new("work-empty")
    layout.unpack("work-empty", scratch / "bundle")
    chroots.debootstrap(scratch / "bundle" / "rootfs", log=workspace.log)
    whole_seconds(scratch / "bundle" / "rootfs")
    created_by = (
        f"debootstrap --variant={chroots.VARIANT} {chroots.SUITE}; dpkg excludes:"
        f" {', '.join(chroots.SLIM_EXCLUDES)}; {chroots.BASE_SETUP}"
    )
    layout.repack("work-base", scratch / "bundle", created_by=created_by, keep_bundle=False)
    layout.configure("work-base", tag, _base_config())
    for temporary in ("work-empty", "work-base"):
        layout.remove(temporary)
    shutil.rmtree(scratch)
    return tag, key


def build(
    name: str, recipe: recipes.Recipe, workspace: Workspace, *, base_tag: str, base_key: str
) -> Built:
    """One image, tagged `recipe.reference` in the layout.

    Its layers: the base; each RUN before the virtualenv; the virtualenv, keyed by its wheels
    but for the project's own (so a change of the code alone reuses it); then the project's
    wheels installed again over it with every later RUN, built every time.
    """
    started = time.monotonic()
    layout = workspace.layout
    scratch = workspace.scratch(name)
    bundle, rootfs = scratch / "bundle", scratch / "bundle" / "rootfs"
    # The cached chain runs in the bundle's rootfs; its actions are bound to that path.
    chain: list[tuple[str, str, Callable[[], None]]] = []  # (created_by, key, action)
    keys = [base_key]
    own_wheels: list[Path] = []
    tail = list(recipe.steps)
    while tail and not own_wheels:
        step = tail.pop(0)
        if isinstance(step, recipes.Run):
            keys.append(_key(keys[-1], step.created_by, step.env, step.cwd))
            chain.append(
                (step.created_by, keys[-1], functools.partial(_run, step, rootfs, workspace))
            )
        else:
            wheels, own_wheels = _wheels(step, workspace, scratch)
            others = sorted(
                (w.name, w.stat().st_size) for w in wheels.iterdir() if w not in own_wheels
            )
            keys.append(_key(keys[-1], step.created_by, step.env, others))
            install = functools.partial(_install_venv, step, rootfs, workspace, wheels)
            chain.append((step.created_by, keys[-1], install))
    tags = [base_tag, *(f"{CACHE_PREFIX}{k}" for k in keys[1:])]
    present = layout.tags()
    done = max(i for i, tag in enumerate(tags) if all(t in present for t in tags[: i + 1]))
    lower = workspace.kept_rootfs(tags[-1])
    if done < len(chain) or not lower.exists():
        layout.unpack(tags[done], bundle)
        for (created_by, _, action), tag in zip(chain[done:], tags[done + 1 :], strict=True):
            action()
            whole_seconds(rootfs)
            layout.repack(tag, bundle, created_by=created_by, keep_bundle=True)
        lower.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(lower, ignore_errors=True)
        rootfs.rename(lower)
    history = [s.created_by for s in tail]
    with overlays.mounted(lower, scratch) as merged:
        if own_wheels and done == len(chain):  # a cached virtualenv has an earlier build's code
            venv = next(s for s in recipe.steps if isinstance(s, recipes.InstallVenv))
            history.insert(0, _reinstall(venv, own_wheels, merged, workspace))
        for step in tail:
            if not isinstance(step, recipes.Run):
                raise RuntimeError(f"{recipe.reference}: a second virtualenv is not built")
            _run(step, merged, workspace)
        unpacked = tree_bytes(merged)
    whole_seconds(scratch / "upper")
    overlays.write_layer(scratch / "upper", scratch / "layer.tar")
    work_tag = f"work-{name}"
    created_by = "; ".join(history)[:2000]
    layout.add_layer(tags[-1], work_tag, scratch / "layer.tar", created_by=created_by)
    layout.configure(work_tag, recipe.reference, recipe.config)
    layout.remove(work_tag)
    shutil.rmtree(scratch)
    return Built(
        image=layout.describe(recipe.reference),
        unpacked_bytes=unpacked,
        seconds=time.monotonic() - started,
    )


def record(workspace: Workspace, built: Sequence[Built]) -> None:
    """.images/images.json: each image's digest, layers and sizes, for the docs and the tests."""
    try:
        found = json.loads(workspace.record.read_text())
    except FileNotFoundError:
        found = {}
    for one in built:
        found[one.image.reference] = {
            "digest": one.image.digest,
            "layers": [dataclasses.asdict(layer) for layer in one.image.layers],
            "compressedBytes": one.image.compressed_bytes,
            "unpackedBytes": one.unpacked_bytes,
            "buildSeconds": round(one.seconds, 1),
            "builtAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    workspace.record.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")


def tree_bytes(root: Path) -> int:
    """The bytes of a root filesystem's files, each hard-linked file once (what `du -b` says
    of a tree's regular files)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _, files in os.walk(root):
        for file in files:
            stat = os.lstat(os.path.join(folder, file))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def whole_seconds(root: Path) -> None:
    """Every modification time under `root` cut to the second below, as Docker writes layers.
    umoci rounds to the nearest second instead: a source file written in the second half of a
    second would then look a second newer than its compiled .pyc, and Python would compile it
    again at every start (it cannot write the .pyc on a read-only root filesystem)."""
    second = 1_000_000_000
    paths = [str(root), *(os.path.join(f, n) for f, ds, fs in os.walk(root) for n in [*ds, *fs])]
    for path in paths:
        info = os.lstat(path)
        if info.st_mtime_ns % second:
            whole = info.st_mtime_ns - info.st_mtime_ns % second
            os.utime(path, ns=(info.st_atime_ns, whole), follow_symlinks=False)


def _run(step: recipes.Run, rootfs: Path, workspace: Workspace) -> None:
    chroots.run(rootfs, step.command, env=dict(step.env), cwd=step.cwd, log=workspace.log)


def _wheels(
    step: recipes.InstallVenv, workspace: Workspace, scratch: Path
) -> tuple[Path, list[Path]]:
    """The builder stage's `pip wheel`, here, in a copy of the build context: the wheels'
    folder, and which of them are the context's own projects."""
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError(
            "the wheels are built for the image's Python 3.11: run the build with a Python 3.11 "
            f"(this is {sys.version.split()[0]})"
        )
    context = scratch / "context"
    for copy in step.context:
        destination = context / copy.destination
        for source in copy.sources:
            path = workspace.root / source
            if path.is_dir():
                ignore = shutil.ignore_patterns(*CONTEXT_IGNORED)
                shutil.copytree(path, destination, ignore=ignore, dirs_exist_ok=True)
            else:
                target = destination / path.name if copy.destination.endswith("/") else destination
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    wheels = scratch / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels)]
    with workspace.log.open("a") as out:
        out.write(f"\n$ pip wheel {' '.join(step.wheel_specs)}\n")
        out.flush()
        subprocess.run(
            [*command, *step.wheel_specs],
            cwd=context,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=PIP_TIMEOUT_SECONDS,
            check=True,
        )
    own = set()
    for spec in step.wheel_specs:
        if spec.startswith((".", "/")):
            pyproject = context / spec.split("[")[0] / "pyproject.toml"
            project = tomllib.loads(pyproject.read_text())["project"]["name"]
            own.add(re.sub(r"[-_.]+", "_", project).lower())
    return wheels, [w for w in wheels.iterdir() if w.name.split("-")[0].lower() in own]


def _install_venv(
    step: recipes.InstallVenv, rootfs: Path, workspace: Workspace, wheels: Path
) -> None:
    """The rest of the builder stage's RUN, in the image, with the wheels where it wants them."""
    binds = [(wheels, step.wheel_dir)]
    chroots.run(rootfs, step.command, env=dict(step.env), cwd="/", log=workspace.log, binds=binds)


def _reinstall(
    step: recipes.InstallVenv, own_wheels: list[Path], rootfs: Path, workspace: Workspace
) -> str:
    """The project's own wheels over a cached virtualenv (the same version, new code): what
    the builder's `pip install` would have put there. Returns the layer's history line."""
    inside = [f"{step.wheel_dir}/{w.name}" for w in own_wheels]
    command = (
        f"{step.path}/bin/pip install --no-deps --force-reinstall {shlex.join(inside)}"
        f" && {step.path}/bin/python -m compileall -q {step.path}"
    )
    binds = [(own_wheels[0].parent, step.wheel_dir)]
    chroots.run(rootfs, command, env=dict(step.env), cwd="/", log=workspace.log, binds=binds)
    return f"RUN {command}"


def _base_config() -> recipes.ImageConfig:
    return recipes.ImageConfig(
        env=recipes.BASE_ENV,
        labels=(),
        user="",
        workdir="",
        exposed_ports=(),
        entrypoint=(),
        cmd=(),
    )


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]
