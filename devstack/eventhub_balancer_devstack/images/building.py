"""Build the images of docker/ into one OCI layout, with the slow parts cached as tags there.

The cache is the layout itself: the Debian base (`cache-base-KEY`) and each RUN of a final stage
that comes before the virtualenv (the consumer's Java runtime, `cache-KEY`) are tagged images,
keyed by a hash of everything that made them. A second build unpacks the last cached one and
builds only the virtualenv and what follows it. `--refresh` drops the cache: the next build
takes Debian's packages (security updates included) afresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from eventhub_balancer_devstack.images import chroots, layouts, recipes

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

    def scratch(self, name: str) -> Path:
        """An empty folder for one build's bundle, context and wheels."""
        path = self.folder / "work" / name
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
    """One image, tagged `recipe.reference` in the layout."""
    started = time.monotonic()
    layout = workspace.layout
    # The RUNs before the virtualenv are cached, each on the one before it.
    cacheable = []
    for step in recipe.steps:
        if not isinstance(step, recipes.Run):
            break
        cacheable.append(step)
    keys = [base_key]
    for step in cacheable:
        keys.append(_key(keys[-1], step.created_by, step.env, step.cwd))
    tags = [base_tag, *(f"{CACHE_PREFIX}{k}" for k in keys[1:])]
    present = layout.tags()
    done = max(i for i, tag in enumerate(tags) if all(t in present for t in tags[: i + 1]))
    scratch = workspace.scratch(name)
    bundle = scratch / "bundle"
    layout.unpack(tags[done], bundle)
    for step, tag in zip(cacheable[done:], tags[done + 1 :], strict=True):
        _run(step, bundle / "rootfs", workspace)
        layout.repack(tag, bundle, created_by=step.created_by, keep_bundle=True)
    # The virtualenv and everything after it: one layer, built every time.
    for step in recipe.steps[len(cacheable) :]:
        if isinstance(step, recipes.Run):
            _run(step, bundle / "rootfs", workspace)
        else:
            _install_venv(step, bundle / "rootfs", workspace, scratch)
    unpacked = tree_bytes(bundle / "rootfs")
    created_by = "; ".join(s.created_by for s in recipe.steps[len(cacheable) :])
    work_tag = f"work-{name}"
    layout.repack(work_tag, bundle, created_by=created_by[:2000], keep_bundle=False)
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


def _run(step: recipes.Run, rootfs: Path, workspace: Workspace) -> None:
    chroots.run(rootfs, step.command, env=dict(step.env), cwd=step.cwd, log=workspace.log)


def _install_venv(
    step: recipes.InstallVenv, rootfs: Path, workspace: Workspace, scratch: Path
) -> None:
    """The builder stage: its `pip wheel` here, in a copy of the build context; the rest of its
    RUN in the image, with the wheels mounted where the Dockerfile puts them."""
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
    chroots.run(
        rootfs,
        step.command,
        env=dict(step.env),
        cwd="/",
        log=workspace.log,
        binds=[(wheels, step.wheel_dir)],
    )


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
