"""A child process the development stack starts in a session of its own ends when the process
that started it is killed outright (`parentdeaths`): a SIGKILLed test run or command leaves no
JVM or control-plane binary holding memory and ports. Azurite's case, through ``ehb local
blob``: tests/devstack/wire/local/test_local_signals.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support import liveprocesses

#: How long the parent's end and the kernel's signal may take on a loaded machine.
END_S = 30.0

STARTERS = {
    "spark": """
        from eventhub_balancer_devstack import sparkcluster
        child = sparkcluster.SparkProcess("x", ["sleep", "600"], log_dir=LOGS, env=dict(os.environ))
        child.start()
        pid = child._process.pid
    """,
    "control plane": """
        from eventhub_balancer_devstack.realkube import processes
        child = processes.ChildProcess("x", ["sleep", "600"], log=LOGS / "x.log")
        child.start()
        pid = child.pid
    """,
}


@pytest.mark.parametrize("starter", sorted(STARTERS))
def test_a_child_ends_with_the_process_that_started_it(starter: str, tmp_path: Path) -> None:
    script = "import os, sys, time\nfrom pathlib import Path\nLOGS = Path(sys.argv[1])\n"
    script += textwrap.dedent(STARTERS[starter])
    script += "print(pid, flush=True)\ntime.sleep(600)\n"
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())  # bounded by pytest's timeout
        assert liveprocesses.alive(child)
        parent.kill()  # SIGKILL: no clean-up of the parent's runs
        parent.wait(END_S)
        deadline = time.monotonic() + END_S
        while liveprocesses.alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not liveprocesses.alive(child), f"the {starter} child outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(END_S)
        if child and liveprocesses.alive(child):
            os.kill(child, signal.SIGKILL)
