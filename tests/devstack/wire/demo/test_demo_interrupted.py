"""``ehb demo`` stopped midway, as a user stops it: Ctrl-C, and a second signal while it
cleans up. Nothing it started may outlive it: not Azurite, not a pod, not its work directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

#: Up to the first step, on a loaded 2-core machine.
START_S = 90
#: Stopping: the producer, the pods' grace period, the operator, the stack.
STOP_S = 60


def _processes() -> dict[int, tuple[int, int]]:
    """Every live process: its parent and its process group."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid, pgid = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except OSError:
            continue  # gone meanwhile
        if state != "Z":
            found[int(stat.parent.name)] = (int(ppid), int(pgid))
    return found


def _descendants(pid: int) -> set[int]:
    processes = _processes()
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        children = [p for p, (ppid, _) in processes.items() if ppid == parent]
        found.update(children)
        todo.extend(children)
    return found


def _left(pids: set[int], pgid: int) -> set[int]:
    """What still runs of ``pids`` and of the process group (pods started again, too)."""
    return {p for p, (_, group) in _processes().items() if p in pids or group == pgid}


@pytest.mark.timeout(START_S + STOP_S + 30)
def test_a_second_signal_during_the_clean_up_leaves_nothing_running(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "eventhub_balancer", "demo"]
    command += ["--partitions", "6", "--grow-to", "7", "--rate", "20", "--interval", "1"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        start_new_session=True,
    )
    started: set[int] = set()
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + START_S
        line = ""
        while "step 1/6" not in line and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line or process.poll() is None, process.stderr and process.stderr.read()
        started = _descendants(process.pid)
        assert started, "the demo started no process"
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: to the terminal's process group
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)  # and again, while it stops
        _, stderr = process.communicate(timeout=STOP_S)
        assert process.returncode == 130, stderr[-3000:]
        assert "ehb: SIGINT: stopping the pods, the operator and the local stack" in stderr
        # The second signal is answered with where each thread is, and stops nothing early.
        assert (
            "ehb: SIGTERM again: still stopping the pods, the operator and the local stack"
            in stderr
        )
        assert 'thread "MainThread":' in stderr
        assert _left(started, process.pid) == set()
        assert list(tmp_path.glob("ehb-demo-*")) == []
    finally:
        for pid in _left({process.pid, *started}, process.pid):
            os.kill(pid, signal.SIGKILL)
        if process.returncode is None:
            process.communicate(timeout=30)
