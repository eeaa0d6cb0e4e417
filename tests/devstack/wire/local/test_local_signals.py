"""`ehb local up` and `ehb local blob` under the signals a user sends: a Ctrl-C while the stack
starts stops it at once, and a SIGKILL leaves no Azurite behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import liveprocesses

pytestmark = pytest.mark.slow

#: Bounds on a loaded 2-core machine: Azurite's node process appears within a few seconds,
#: and a stop takes at most its STOP_TIMEOUT_S per process.
APPEAR_S = 30.0
STOP_S = 30.0


def _azurite_of(process: subprocess.Popen[str]) -> int:
    """The pid of the Azurite child ``process`` starts, once it is there."""
    deadline = time.monotonic() + APPEAR_S
    while time.monotonic() < deadline:
        for pid, cmdline in liveprocesses.children(process.pid).items():
            if "azurite" in cmdline:
                return pid
        assert process.poll() is None, process.communicate(timeout=STOP_S)
        time.sleep(0.01)
    pytest.fail(f"no Azurite process within {APPEAR_S} s")


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + STOP_S
    while liveprocesses.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not liveprocesses.alive(pid)


@contextlib.contextmanager
def _ehb(*args: str) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """``ehb ARGS`` as a process, and a list for the Azurite pids it starts; whatever of both
    still runs on the way out is killed."""
    argv = [sys.executable, "-m", "eventhub_balancer", *args]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    azurites: list[int] = []
    try:
        yield process, azurites
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=STOP_S)
        for pid in azurites:
            if liveprocesses.alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_signal_while_the_stack_starts_stops_it_at_once(tmp_path: Path) -> None:
    ports = ["--eventhubs-port=0", "--blob-port=0", "--kube-port=0"]
    with _ehb("local", "up", "--hub", "orders=2", *ports, f"--state-dir={tmp_path}") as (
        process,
        azurites,
    ):
        # Azurite is the first service started: the stack is starting, nothing is printed.
        azurites.append(_azurite_of(process))
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=STOP_S)
        # Interrupted before it was up: nothing printed of what it would have served.
        assert "ehb: SIGTERM: stopping the local stack" in err
        assert "Ctrl-C or SIGTERM stops everything" not in out
        assert process.returncode == 130, err
        assert _gone(azurites[0])


def test_a_killed_local_blob_leaves_no_azurite() -> None:
    with _ehb("local", "blob", "--port=0") as (process, azurites):
        assert process.stdout is not None
        assert "BlobEndpoint=" in process.stdout.readline()  # served
        azurites.append(_azurite_of(process))
        process.kill()  # SIGKILL: no clean-up of ours runs
        process.communicate(timeout=STOP_S)
        assert _gone(azurites[0]), "Azurite outlived the command that started it"
