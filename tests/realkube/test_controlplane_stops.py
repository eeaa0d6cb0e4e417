"""A start of the real control plane that is interrupted kills what it started at once.

kube-apiserver ignores SIGTERM until it serves, so a Ctrl-C while it started waited out the
10 s bound of each process before the SIGKILL. The binaries here are shell scripts that ignore
SIGTERM as it does; the interruption comes once the first of them is up (its pid written).
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytest

from eventhub_balancer_devstack.realkube import controlplanes, processes
from tests.support import liveprocesses


def _binaries(folder: Path, pids: Path) -> None:
    folder.mkdir()
    for name in processes.BINARIES:
        script = folder / name
        script.write_text(f"#!/bin/sh\ntrap '' TERM\necho $$ > {pids / name}.pid\nexec sleep 120\n")
        script.chmod(0o755)


def test_an_interrupted_start_kills_its_processes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _binaries(tmp_path / "bin", tmp_path)
    monkeypatch.setenv("EHB_CONTROLPLANE_BIN", str(tmp_path / "bin"))
    etcd_pid = tmp_path / "etcd.pid"

    def healthy(self: controlplanes.RealControlPlane) -> bool:
        if etcd_pid.exists() and etcd_pid.read_text().strip():
            raise KeyboardInterrupt  # a Ctrl-C while it waits for etcd, which ignores SIGTERM
        return False

    monkeypatch.setattr(controlplanes.RealControlPlane, "_etcd_healthy", healthy)
    plane = controlplanes.RealControlPlane(crds_dir=None, folder=tmp_path / "plane")
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        plane.start()
    pid = int(etcd_pid.read_text())
    assert not liveprocesses.alive(pid)
    assert "did not stop within" not in caplog.text
    assert list((tmp_path / "plane").iterdir()) == []  # its folder is removed


def test_a_process_is_asked_to_stop_first(tmp_path: Path) -> None:
    """Outside a failed start (`RealControlPlane.stop` of a plane that serves), SIGTERM comes
    first: the processes flush and close their connections."""
    process = processes.ChildProcess("sleeper", ["sleep", "120"], log=tmp_path / "sleeper.log")
    process.start()
    popen = process._process
    assert popen is not None
    process.stop()
    assert popen.returncode == -signal.SIGTERM
