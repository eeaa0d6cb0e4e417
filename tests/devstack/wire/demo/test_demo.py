"""``ehb demo`` end to end, shortened: the real operator, consumer processes, a producer.

The same scenario as ``make demo`` (2 -> 6 -> 3 pods, a deletion, a grown hub, a SIGKILL)
on a smaller hub and a shorter cycle, through the command line as a user runs it. It checks
the JSON summary's shape and the project's promises: every step balances, nothing is lost,
planned moves duplicate nothing, a SIGKILL duplicates at most the killed pod's unfinished
batches, and a deleted pod's partitions fail over to the other pods. Timings are reported,
never asserted tightly: the bounds here are generous, for a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack import recording
from eventhub_balancer_devstack.scenarios import runs, systems

pytestmark = pytest.mark.slow

#: The shortened run takes 40-60 s on 2 shared cores; three times that means something hangs.
RUN_TIMEOUT_S = 180
#: A deleted pod's partitions must be taken up by another Ready pod within this long. The
#: target is 2 s; this bound only catches a failover that does not happen (a hand-off that
#: waits out its timeout, a pod that never applies its assignment).
FAILOVER_BOUND_S = 20.0
PARTITIONS, GROW_TO = 8, 10
RATE, SETTLE_S, STEPS = 100, 0.5, 6


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, str]:
    """One shortened ``ehb demo --json`` for all the checks below: its summary, its work
    directory and its stderr (for failure messages)."""
    work = tmp_path_factory.mktemp("demo")
    command = [
        sys.executable,
        "-m",
        "eventhub_balancer",
        "demo",
        "--json",
        "--partitions",
        str(PARTITIONS),
        "--grow-to",
        str(GROW_TO),
        "--rate",
        str(RATE),
        "--interval",
        "2",
        "--settle",
        str(SETTLE_S),
        "--balance-timeout",
        "40",
        "--work-dir",
        str(work / "run"),
    ]
    # Its own process group: on a timeout the consumer processes it started go with it.
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=work,
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
    print(json.dumps(summary, indent=1))  # the figures, in the test log
    assert process.returncode == 0, stderr[-3000:]
    return summary, work / "run", stderr


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_every_step_balances_and_nothing_is_lost(
    demo_run: tuple[dict[str, Any], Path, str],
) -> None:
    summary, _, stderr = demo_run
    steps = {s["step"]: s for s in summary["steps"]}
    assert list(steps) == [
        "start 2 pods",
        "scale 2 -> 6",
        "scale 6 -> 3",
        "delete a pod",
        f"grow {PARTITIONS} -> {GROW_TO} partitions",
        "SIGKILL a pod",
    ]
    assert [s["kind"] for s in summary["steps"]] == [
        "start",
        "scale-out",
        "scale-in",
        "delete",
        "grow",
        "kill",
    ]
    # The producer ran through every step: the steady time after each alone, at its rate,
    # gives 300 events (half of it allowed for a producer that falls behind on a busy
    # machine). How long the steps take, and so the total, is the machine's speed.
    assert summary["produced"] >= RATE * SETTLE_S * STEPS / 2
    assert summary["lost"] == 0
    assert summary["processed"] == summary["produced"]
    unbalanced = [s for s in summary["steps"] if s["balanced_s"] is None]
    assert unbalanced == [], stderr[-3000:]
    for step in summary["steps"]:
        # The headline leaves the pods' start-up out; end to end includes it. A step that
        # starts no process (scale-in, deletion, growth) counts from its action.
        assert step["pods_up_s"] is not None
        if step["kind"] not in runs.STARTING:
            assert step["pods_up_s"] == 0
        assert step["end_to_end_s"] == pytest.approx(
            step["balanced_s"] + step["pods_up_s"], abs=0.01
        )


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_planned_moves_duplicate_nothing(demo_run: tuple[dict[str, Any], Path, str]) -> None:
    summary, _, _ = demo_run
    planned = [s for s in summary["steps"] if s["kind"] in runs.PLANNED]
    assert len(planned) == 5
    assert [(s["step"], s["duplicates"]) for s in planned] == [(s["step"], 0) for s in planned]
    assert next(s for s in summary["steps"] if s["kind"] == "scale-out")["moved"] > 0
    assert next(s for s in summary["steps"] if s["kind"] == "grow")["moved"] == 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_a_sigkilled_pod_keeps_its_partitions(demo_run: tuple[dict[str, Any], Path, str]) -> None:
    summary, _, _ = demo_run
    kill = next(s for s in summary["steps"] if s["kind"] == "kill")
    # Restarted within podGraceSeconds: nothing moves, and its partitions are processed again.
    assert kill["moved"] == 0
    assert kill["failover_s"] is not None
    # It may repeat what it processed but had not checkpointed: per partition, the batch in
    # its handler and the one whose checkpoint was in flight.
    assert kill["duplicates"] <= 2 * systems.BATCH_SIZE * -(-PARTITIONS // 2)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_a_deleted_pods_partitions_fail_over_to_other_ready_pods(
    demo_run: tuple[dict[str, Any], Path, str],
) -> None:
    summary, work, _ = demo_run
    delete = next(s for s in summary["steps"] if s["kind"] == "delete")
    gone = delete["pod"]
    assert gone
    assert delete["moved"] > 0
    # Seen by the runner: each partition the pod held was held and taken up (receivers open)
    # by another Ready pod, within the bound.
    assert delete["failover_s"] is not None
    assert delete["failover_s"] <= FAILOVER_BOUND_S
    # Seen in what was processed: the deleted pod processed some partitions, and for each
    # of them the last batch came from another pod with a higher epoch.
    batches = recording.RecordReader(work / "demo" / "records").read_new()
    held = {b.partition for b in batches if b.pod == gone}
    assert held
    last = {}
    for batch in batches:
        last[batch.partition] = batch
    for partition in sorted(held):
        assert last[partition].pod != gone, partition
        mine = max(b.epoch for b in batches if b.pod == gone and b.partition == partition)
        assert last[partition].epoch > mine, partition


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_run_log_says_what_the_operator_did(
    demo_run: tuple[dict[str, Any], Path, str],
) -> None:
    """demo.log was mostly kopf's line per watch event (161 of 281 lines in one run) and the
    emulator's framing errors as SDK clients closed (64): the operator's own lines, what a
    reader looks for, were 27 among them. It is now logged as `ehb operator` logs."""
    _, work, _ = demo_run
    log = (work / "demo.log").read_text()
    assert "eventhub_balancer.handlers.cycles" in log
    assert "Handler 'build_registry" not in log  # kopf.objects, a line per watch event
    assert "closing with amqp:connection:framing-error" not in log
    assert "OS signals are ignored" not in log  # kopf's, in a thread the stop flag stops
