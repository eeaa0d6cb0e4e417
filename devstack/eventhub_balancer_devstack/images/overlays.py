"""A layer written from what changed, without unpacking the image under it again.

umoci's `unpack` and `repack` read and hash every file of an image: for the consumer (1.5 GB)
about a minute each on these machines, whatever changed. The last layer, rebuilt by every
build, is made here instead: an overlay mount puts a scratch folder over the kept root
filesystem of the cached image below it, the steps run on the merged view, and the overlay's
upper folder (exactly what changed) becomes the layer's tar, its deletions written as OCI
whiteouts.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

#: How overlayfs marks a folder whose lower contents are hidden, and OCI's names for it and for
#: a deleted file.
OPAQUE_XATTR, OPAQUE_WHITEOUT, WHITEOUT_PREFIX = "trusted.overlay.opaque", ".wh..wh..opq", ".wh."


@contextlib.contextmanager
def mounted(lower: Path, scratch: Path) -> Iterator[Path]:
    """`lower` (left untouched) with a writable overlay; yields the merged folder. What changed
    is in `scratch / "upper"` after the context."""
    upper, work, merged = scratch / "upper", scratch / "overlay-work", scratch / "merged"
    for folder in (upper, work, merged):
        folder.mkdir(parents=True)
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], check=True)
    try:
        yield merged
    finally:
        subprocess.run(["umount", str(merged)], check=True)


def write_layer(upper: Path, destination: Path) -> None:
    """The overlay's upper folder as an uncompressed OCI layer tar."""
    with tarfile.open(destination, "w", format=tarfile.PAX_FORMAT) as archive:
        for folder, dirs, files in os.walk(upper):
            dirs.sort()
            here = Path(folder)
            for name in sorted([*dirs, *files]):
                path = here / name
                relative = path.relative_to(upper).as_posix()
                info = os.lstat(path)
                if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:  # overlayfs's deletion
                    _add_empty(archive, str(Path(relative).parent / f"{WHITEOUT_PREFIX}{name}"))
                    continue
                archive.add(path, arcname=relative, recursive=False, filter=_numeric)
                if stat.S_ISDIR(info.st_mode) and _opaque(path):
                    _add_empty(archive, f"{relative}/{OPAQUE_WHITEOUT}")


def _opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _numeric(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Owners by number only: the image's names are in its own /etc/passwd, not this host's."""
    info.uname = info.gname = ""
    return info


def _add_empty(archive: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name.removeprefix("./"))
    info.mode = 0o644
    archive.addfile(info)
