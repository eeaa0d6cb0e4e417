"""``ehb demo`` end to end, shortened: the real operator, consumer processes, a producer.

The same scenario as ``make demo`` (2 -> 6 -> 3 pods, a deletion, a SIGKILL, a grown hub)
on a smaller hub and a shorter cycle, through the command line as a user runs it. It checks
the JSON summary's shape and the project's promises: every step balances, nothing is lost,
planned moves duplicate nothing, a SIGKILL duplicates at most the killed pod's unfinished
batches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eventhub_balancer.local.scenarios import systems

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLANNED = ("start 2 pods", "scale 2 -> 6", "scale 6 -> 3", "delete a pod")
#: The whole shortened run takes about a minute on 2 cores; more means something hangs.
RUN_TIMEOUT_S = 240


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_the_demo_balances_every_step_and_loses_nothing(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "eventhub_balancer",
        "demo",
        "--json",
        "--partitions",
        "8",
        "--grow-to",
        "10",
        "--rate",
        "100",
        "--interval",
        "2",
        "--settle",
        "1",
        "--balance-timeout",
        "30",
        "--work-dir",
        str(tmp_path / "demo"),
    ]
    # Its own process group: on a timeout the consumer processes it started go with it.
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)
        raise
    assert stdout, stderr[-3000:]
    summary = json.loads(stdout)
    steps = {s["step"]: s for s in summary["steps"]}
    assert list(steps) == [*PLANNED, "SIGKILL a pod", "grow 8 -> 10 partitions"]
    assert summary["produced"] > 1000
    assert summary["lost"] == 0
    assert summary["processed"] == summary["produced"]
    unbalanced = [s for s in summary["steps"] if s["balanced_s"] is None]
    assert unbalanced == [], stderr[-3000:]
    for name in PLANNED:
        assert steps[name]["duplicates"] == 0, steps[name]
    # A SIGKILL may repeat what the killed pod processed but had not checkpointed yet: per
    # partition, the batch in its handler and the one whose checkpoint was in flight.
    assert steps["SIGKILL a pod"]["duplicates"] <= 2 * systems.BATCH_SIZE * 4
    assert steps["SIGKILL a pod"]["moved"] == 0  # restarted within podGraceSeconds: kept
    assert steps["delete a pod"]["moved"] > 0
    assert steps["delete a pod"]["balanced_s"] < 5.0
    assert steps["grow 8 -> 10 partitions"]["moved"] == 0
    assert process.returncode == 0, stderr[-3000:]
