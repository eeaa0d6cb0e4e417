"""`python -m eventhub_balancer_devstack.images [NAME...] [--refresh] [--smoke]` (`make images`).

Builds the images of docker/ (by default the operator and the consumer) into .images/oci and
prints each one's reference, digest and sizes. Needs root (debootstrap, chroot, and umoci keep
the files' owners); the tools come from Debian's packages and are installed here when missing.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from eventhub_balancer import __version__
from eventhub_balancer_devstack.images import building, recipes, smoking

#: Command -> the Debian package that has it. runc runs the images for --smoke and the tests.
TOOLS = {
    "debootstrap": "debootstrap",
    "umoci": "umoci",
    "runc": "runc",
    "unshare": "util-linux",
    "chroot": "coreutils",
}
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: What --smoke runs in each image, as the tests do.
SMOKE_COMMANDS = (("ehb", "--version"), ("ehb", "consume", "--help"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make images", description=__doc__.split("\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        default=list(building.DEFAULT_IMAGES),
        metavar="NAME",
        help=f"images to build, of {', '.join(building.DOCKERFILES)} (default: operator consumer)",
    )
    parser.add_argument("--refresh", action="store_true", help="rebuild the cached Debian layers")
    parser.add_argument("--smoke", action="store_true", help="run `ehb --version` in each image")
    options = parser.parse_args(argv)
    unknown = [n for n in options.names if n not in building.DOCKERFILES]
    if unknown:
        parser.error(
            f"no image {', '.join(unknown)}: choose from {', '.join(building.DOCKERFILES)}"
        )
    workspace = building.Workspace(Path.cwd())
    if not (workspace.root / "docker").is_dir():
        print("run from the repository root (where docker/ is)", file=sys.stderr)
        return 2
    problem = ensure_tools()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    workspace.folder.mkdir(exist_ok=True)
    with (workspace.folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second `make images` waits for the first
        return _build(options.names, workspace, refresh=options.refresh, smoke=options.smoke)


def _build(names: list[str], workspace: building.Workspace, *, refresh: bool, smoke: bool) -> int:
    workspace.log.write_text("")
    started = time.monotonic()
    base_tag, base_key = building.base(workspace, refresh=refresh)
    print(f"Debian base ready ({time.monotonic() - started:.0f} s; log: {workspace.log})")
    built = []
    for name in dict.fromkeys(names):
        text = (workspace.root / building.DOCKERFILES[name]).read_text()
        recipe = recipes.recipe(text, version=__version__)
        built.append(building.build(name, recipe, workspace, base_tag=base_tag, base_key=base_key))
        one = built[-1]
        print(
            f"{one.image.reference}  {one.image.digest}  {len(one.image.layers)} layers, "
            f"{one.image.compressed_bytes / 1e6:.1f} MB compressed, "
            f"{one.unpacked_bytes / 1e6:.1f} MB unpacked  ({one.seconds:.0f} s)"
        )
    workspace.layout.collect_garbage()
    workspace.prune(workspace.layout.tags())
    building.record(workspace, built)
    print(f"in {workspace.layout.path} ({time.monotonic() - started:.0f} s); to push one:")
    print(
        f"  skopeo copy oci:{workspace.layout.path.relative_to(workspace.root)}:REFERENCE docker://REGISTRY/REFERENCE"
    )
    if smoke:
        for one in built:
            with smoking.unpacked(
                workspace.layout,
                one.image.reference,
                writable=("/tmp",),
                scratch=workspace.folder / "work",
            ) as bundle:
                for number, args in enumerate(SMOKE_COMMANDS):
                    result = bundle.run(args, name=f"ehb-smoke-{number}")
                    first = (result.stdout or result.stderr).strip().splitlines()[:1]
                    print(
                        f"  {one.image.reference}: {' '.join(args)} -> {result.returncode} {first}"
                    )
    return 0


def ensure_tools() -> str | None:
    """None when the tools are there (installed from Debian's packages as root), or what to do."""
    if os.geteuid() != 0:
        return (
            "building the images needs root: debootstrap and chroot make the root filesystem, "
            "and umoci keeps its files' owners (run `make images` as root)"
        )
    missing = sorted({p for tool, p in TOOLS.items() if shutil.which(tool) is None})
    if not KEYRING.exists():
        missing.append("debian-archive-keyring")
    if not missing:
        return None
    if shutil.which("apt-get") is None:
        return f"install these packages (or their equivalents): {' '.join(missing)}"
    print(f"installing {' '.join(missing)} for the image builds")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return None


if __name__ == "__main__":
    sys.exit(main())
