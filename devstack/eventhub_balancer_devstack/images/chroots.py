"""Commands run inside a root filesystem, as a Dockerfile's RUN runs them (needs root).

Each command runs in a private mount namespace (`unshare --mount`): the host's /dev, a /proc
and the host's resolv.conf (apt-get downloads) are mounted there and vanish with the command,
so nothing of the host is left in the layer that umoci writes from the root filesystem.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Debian's release and the smallest variant that has apt (Docker's Debian images start there).
SUITE, VARIANT = "bookworm", "minbase"
#: What the python:3.11-slim-bookworm image carries beside the interpreter, from Debian:
#: ensurepip for `python -m venv`, `python` itself, the CA bundle, /etc/services and zoneinfo.
BASE_PACKAGES = (
    "python3.11",
    "python3.11-venv",
    "python-is-python3",
    "ca-certificates",
    "netbase",
    "tzdata",
)
#: Where apt finds packages: debootstrap's own default unless EHB_DEBIAN_MIRROR names one;
#: the security suite beside it unless EHB_DEBIAN_SECURITY_MIRROR names another.
MIRROR_VARIABLE, SECURITY_MIRROR_VARIABLE = "EHB_DEBIAN_MIRROR", "EHB_DEBIAN_SECURITY_MIRROR"
#: Updates applied and the packages installed; apt's lists and downloads left out, as in
#: Docker's Debian images (a RUN that wants apt runs `apt-get update` first).
BASE_SETUP = (
    "export DEBIAN_FRONTEND=noninteractive"
    " && apt-get update -qq && apt-get upgrade -y -qq"
    f" && apt-get install -y -qq --no-install-recommends {' '.join(BASE_PACKAGES)}"
    " && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/cache/debconf/*-old"
)
#: The "slim" rule of Docker's Debian images (python:3.11-slim-bookworm is built on one): dpkg
#: leaves out documentation, manuals and translations, but keeps each package's copyright file.
SLIM_EXCLUDES = (
    "path-exclude /usr/share/doc/*",
    "path-include /usr/share/doc/*/copyright",
    *(f"path-exclude /usr/share/{d}/*" for d in ("groff", "info", "linda", "locale", "man")),
    "path-exclude /usr/share/lintian/overrides/*",
)
#: What debootstrap installed before the rule was there, removed by the same rule.
SLIM_EXISTING = (
    "find /usr/share/doc -mindepth 1 ! -name copyright ! -type d -delete"
    " && find /usr/share/doc -mindepth 1 -type d -empty -delete"
    " && rm -rf /usr/share/groff/* /usr/share/info/* /usr/share/linda/* /usr/share/locale/*"
    " /usr/share/man/* /usr/share/lintian/overrides/*"
)
#: A command that outlives this is stuck (a download that stalls, a prompt).
COMMAND_TIMEOUT_SECONDS = 1800


class ChrootError(RuntimeError):
    """A command inside the root filesystem failed; the message carries its last output."""


def debootstrap(rootfs: Path, *, log: Path) -> None:
    """Debian's minimal root filesystem, then its updates and the Python of the base image."""
    mirror = os.environ.get(MIRROR_VARIABLE, "")
    command = [
        "debootstrap",
        f"--variant={VARIANT}",
        SUITE,
        str(rootfs),
        *([mirror] if mirror else []),
    ]
    _logged(command, log=log, what="debootstrap")
    write_sources(rootfs)
    (rootfs / "etc" / "resolv.conf").write_text("")  # the runtime mounts its own
    (rootfs / "etc" / "dpkg" / "dpkg.cfg.d" / "slim").write_text("\n".join(SLIM_EXCLUDES) + "\n")
    run(
        rootfs,
        f"{SLIM_EXISTING} && {BASE_SETUP}",
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        cwd="/",
        log=log,
    )
    # The device nodes debootstrap made: a container runtime mounts /dev, the image holds none.
    for node in (rootfs / "dev").iterdir():
        if node.is_dir() and not node.is_symlink():
            shutil.rmtree(node)
        else:
            node.unlink()


def write_sources(rootfs: Path) -> None:
    """apt's sources as Docker's Debian images have them: the release, its updates, security."""
    listed = (rootfs / "etc" / "apt" / "sources.list").read_text().split()
    mirror = listed[listed.index("deb") + 1]
    security = os.environ.get(SECURITY_MIRROR_VARIABLE) or f"{mirror.rstrip('/')}-security"
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    (rootfs / "etc" / "apt" / "sources.list.d" / "debian.sources").write_text(
        f"Types: deb\nURIs: {mirror}\nSuites: {SUITE} {SUITE}-updates\nComponents: main\n"
        f"Signed-By: {keyring}\n\n"
        f"Types: deb\nURIs: {security}\nSuites: {SUITE}-security\nComponents: main\n"
        f"Signed-By: {keyring}\n"
    )
    (rootfs / "etc" / "apt" / "sources.list").unlink()


def run(
    rootfs: Path,
    command: str,
    *,
    env: Mapping[str, str],
    cwd: str,
    log: Path,
    binds: Sequence[tuple[Path, str]] = (),
) -> None:
    """`/bin/sh -c COMMAND` as root in `rootfs`, with only `env`; `binds` (host folder, path
    inside) are mounted read-only for the command's time and their mount points removed after."""
    root = str(rootfs)
    created = [inside for _, inside in binds if not (rootfs / inside.lstrip("/")).exists()]
    mounts = [
        f"mount --rbind /dev {shlex.quote(root + '/dev')}",
        f"mount -t proc proc {shlex.quote(root + '/proc')}",
        f"mount --bind /etc/resolv.conf {shlex.quote(root + '/etc/resolv.conf')}",
    ]
    for host, inside in binds:
        target = shlex.quote(root + inside)
        mounts += [f"mkdir -p {target}", f"mount --bind -o ro {shlex.quote(str(host))} {target}"]
    inner = [
        "chroot", root, "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
        "/bin/sh", "-c", 'cd "$0" && exec /bin/sh -c "$1"', cwd, command,
    ]  # fmt: skip
    script = " && ".join([*mounts, "exec " + shlex.join(inner)])
    try:
        _logged(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--fork",
                "--",
                "/bin/sh",
                "-c",
                script,
            ],
            log=log,
            what=command,
        )
    finally:
        for inside in created:
            (rootfs / inside.lstrip("/")).rmdir()


def _logged(command: Sequence[str], *, log: Path, what: str) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {what}\n")
        out.flush()
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise ChrootError(f"{what[:200]}\nexited {done.returncode}; the end of {log}:\n{tail}")
