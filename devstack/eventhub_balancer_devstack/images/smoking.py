"""Run a command in a built image with runc, as a kubelet would run the pod.

The image is unpacked into a bundle (umoci writes the runtime's config.json from the image's
configuration: user, environment, working directory); the root filesystem is made read-only
and each path the Dockerfile's header asks an emptyDir for is a tmpfs, as in the charts'
Deployments (`readOnlyRootFilesystem: true`).

runc rather than crun: Debian bookworm's crun (1.8) refuses a host whose cgroups are mounted
in hybrid mode with a controller on the v2 hierarchy, as on these machines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from eventhub_balancer_devstack.images import layouts

#: `ehb --version` takes a second; a JVM's start a few. Longer than this is a hang.
RUN_TIMEOUT_SECONDS = 120


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@dataclasses.dataclass(frozen=True)
class Bundle:
    """An unpacked image, ready to run commands in."""

    path: Path
    writable: tuple[str, ...]

    def run(self, args: Sequence[str], *, name: str) -> Result:
        config_path = self.path / "config.json"
        config = json.loads(config_path.read_text())
        config["process"]["args"] = list(args)
        config["process"]["terminal"] = False
        config["root"]["readonly"] = True
        config["mounts"] = [m for m in config["mounts"] if m["destination"] not in self.writable]
        config["mounts"] += [
            {
                "destination": path,
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", "size=256m"],
            }
            for path in self.writable
        ]
        config_path.write_text(json.dumps(config))
        done = subprocess.run(
            ["runc", "run", "--bundle", str(self.path), f"{name}-{os.getpid()}"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
            check=False,
        )
        return Result(
            args=tuple(args), returncode=done.returncode, stdout=done.stdout, stderr=done.stderr
        )

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"


@contextlib.contextmanager
def unpacked(
    layout: layouts.Layout, reference: str, *, writable: Sequence[str], scratch: Path
) -> Iterator[Bundle]:
    """The image unpacked under `scratch` (on the layout's disk: a consumer image is 1 GB),
    removed on exit."""
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        path = Path(folder) / "bundle"
        layout.unpack_to_run(reference, path)
        yield Bundle(path=path, writable=tuple(writable))
