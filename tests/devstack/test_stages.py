"""The stage breakdown of a benchmark step (`benchmarks.stages`), from made-up records: the
API server's commits, the operator's cycle lines and a pod's log lines, in the formats the
components write them."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest

from eventhub_balancer.adapters import receiving
from eventhub_balancer.balancing import models
from eventhub_balancer.cli import logformats
from eventhub_balancer.consumer import partitions
from eventhub_balancer.contracts import configmaps, podassignments, specs
from eventhub_balancer.handlers import cycles
from eventhub_balancer_devstack.benchmarks import recordviews, stagerecords, stages

T = 1_800_000_000.0
SPEC = specs.parse_spec(
    {
        "eventHub": {
            "fullyQualifiedNamespace": "shop.servicebus.windows.net",
            "name": "orders",
            "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
        },
        "checkpointStore": {
            "containerName": "checkpoints",
            "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
        },
        "selector": {"matchLabels": {"app": "orders"}},
    }
)
SCOPE = stages.Scope(namespace="shop", consumer="orders", labels={"app": "orders"})


def pod(name: str, *, ready: bool) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "orders"}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def cm(
    pod_name: str,
    generation: int,
    entries: dict[str, tuple[int, str]],
    *,
    applied: int | None = None,
    released: dict[str, int] | None = None,
) -> dict[str, Any]:
    data = podassignments.build_data(
        spec=SPEC,
        consumer="orders",
        pod=pod_name,
        generation=generation,
        partitions={
            models.PartitionId(p): podassignments.PartitionEntry(
                epoch=e,
                state="owned" if s == "owned" else "revoking",
            )
            for p, (e, s) in entries.items()
        },
    )
    annotations: dict[str, str] = {}
    if applied is not None:
        annotations[configmaps.ANNOTATION_APPLIED_GENERATION] = str(applied)
    if released:
        annotations[configmaps.ANNOTATION_RELEASED] = configmaps.build_released(released)
    return {
        "kind": "ConfigMap",
        "metadata": {
            "name": f"orders-{pod_name}",
            "namespace": "shop",
            "uid": f"uid-{pod_name}",
            "annotations": annotations,
        },
        "data": data,
    }


def cycle_line(woke: float, decide_ms: float, writes: int, write_ms: float) -> logging.LogRecord:
    iso = datetime.datetime.fromtimestamp(woke, datetime.UTC).isoformat(timespec="microseconds")
    return logging.LogRecord(
        cycles.__name__,
        logging.DEBUG,
        "cycles.py",
        1,
        cycles.CYCLE_TIMES,
        ("shop", "orders", iso, decide_ms, writes, write_ms),
        None,
    )


def pod_line(at: float, message: str, *args: object) -> str:
    record = logging.LogRecord("x", logging.INFO, "x.py", 1, message, args, None)
    record.created, record.msecs = at, (at % 1) * 1000
    return logging.Formatter(logformats.TEXT_FORMAT).format(record)


def scenario() -> stages.Records:
    """p-2 turns Ready; the operator revokes partition 3 from p-1, p-1 releases it, the
    operator assigns it to p-2, which opens its link and receives."""
    a1 = cm("p-1", 1, {"3": (1, "owned")}, applied=1)
    a2 = cm("p-1", 2, {"3": (1, "revoking")}, applied=1)
    a3 = cm("p-1", 2, {"3": (1, "revoking")}, applied=2, released={"3": 1})
    b1 = cm("p-2", 1, {}, applied=1)
    b2 = cm("p-2", 2, {"3": (2, "owned")}, applied=1)
    b3 = cm("p-2", 2, {"3": (2, "owned")}, applied=2)
    writes = [
        ("MODIFIED", pod("p-2", ready=True), pod("p-2", ready=False), T + 0.000),
        ("MODIFIED", a2, a1, T + 0.150),
        ("MODIFIED", a3, a2, T + 0.300),
        ("MODIFIED", b2, b1, T + 0.380),
        ("MODIFIED", b3, b2, T + 0.500),
        # Another consumer's pod: not this step's.
        (
            "MODIFIED",
            {**pod("x", ready=True), "metadata": {"name": "x", "namespace": "other"}},
            None,
            T + 0.010,
        ),
    ]
    pods, maps = stagerecords.commits(writes)
    found = [
        stagerecords.cycle_of(cycle_line(T + 0.100, 20.0, 3, 80.0)),
        stagerecords.cycle_of(cycle_line(T + 0.350, 10.0, 2, 40.0)),
    ]
    lines = [
        pod_line(T + 0.250, partitions.FINAL_CHECKPOINT, "3", 1, 41, 95.0),
        pod_line(T + 0.700, receiving.LINK_OPEN, "3", 2, 400.0),
        pod_line(T + 0.950, partitions.FIRST_EVENTS, "3", 2, 12, 600.0),
        pod_line(T + 0.960, "partition %s: processing with epoch %d", "3", 2),
    ]
    events = list(stagerecords.pod_events("p-1", lines[:1])) + list(
        stagerecords.pod_events("p-2", lines[1:])
    )
    return stages.Records(
        pods=pods, maps=maps, cycles=[c for c in found if c is not None], pod_events=events
    )


def test_every_stage_of_a_hand_off_is_timed_from_the_records() -> None:
    found = stages.durations(scenario(), SCOPE, start=T - 1, end=T + 0.6)
    got = {k: [round(v * 1000) for v in values] for k, values in found.items()}
    assert got == {
        "pod_change_to_wake": [100],
        "wake_to_decision": [20, 10],
        "decision_to_written": [30, 20],
        "written_to_applied": [150, 120],
        "revocation_to_final_checkpoint": [100],
        "final_checkpoint_to_acknowledgement": [50],
        "revocation_to_acknowledgement": [150],
        "acknowledgement_to_seen": [50],
        "assignment_to_receiver_open": [320],
        "receiver_handshake": [400],
        "receiver_open_to_first_event": [250],
    }


def test_a_stage_without_records_is_absent_not_zero() -> None:
    full = scenario()
    bare = stages.Records(pods=full.pods, maps=full.maps, cycles=full.cycles)
    found = stages.figures(stages.durations(bare, SCOPE, start=T - 1, end=T + 0.6))
    assert "revocation_to_final_checkpoint" not in found
    assert "assignment_to_receiver_open" not in found
    assert found["revocation_to_acknowledgement"] == {
        "median_ms": 150.0,
        "max_ms": 150.0,
        "count": 1,
    }


def test_only_the_changes_of_the_step_count() -> None:
    found = stages.durations(scenario(), SCOPE, start=T + 0.2, end=T + 0.6)
    assert "pod_change_to_wake" not in found
    assert "revocation_to_acknowledgement" not in found  # revoked before the step
    assert [round(v * 1000) for v in found["written_to_applied"]] == [120]


def test_a_pod_that_applied_nothing_yet_is_starting_not_waiting() -> None:
    first = cm("p-9", 1, {"5": (1, "owned")})
    applied = cm("p-9", 1, {"5": (1, "owned")}, applied=1)
    pods, maps = stagerecords.commits(
        [("ADDED", first, None, T), ("MODIFIED", applied, first, T + 9)]
    )
    found = stages.durations(
        stages.Records(pods=pods, maps=maps, cycles=[]), SCOPE, start=T - 1, end=T + 10
    )
    assert "written_to_applied" not in found


def test_other_log_lines_and_other_loggers_are_not_cycles() -> None:
    record = logging.LogRecord("x", logging.INFO, "x.py", 1, "%s/%s: hello", ("a", "b"), None)
    assert stagerecords.cycle_of(record) is None


def test_cycle_lines_are_kept_and_the_rest_goes_on_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger(cycles.__name__)
    level = logger.level
    with stagerecords.CycleRecords() as kept:
        logger.debug(cycles.CYCLE_TIMES, "shop", "orders", "2027-01-15T08:00:00+00:00", 1, 0, 2)
        logger.warning("something else")
    assert [c.consumer for c in kept.take()] == ["orders"]
    assert logger.level == level
    assert "something else" in caplog.text


def test_the_stage_tables_render_from_a_record() -> None:
    figure = {"median_ms": 12.5, "max_ms": 40.0, "count": 3}
    balance = {"steps": [{"step": "scale 2 -> 6", "stages": {"wake_to_decision": figure}}]}
    text = recordviews.balance_stages(balance)
    assert "| wake -> decision | 12 / 40 (3) |" in text
    assert "pod change" not in text  # not measured: no row
    assert "before the benchmark timed" in recordviews.balance_stages({"steps": [{"step": "x"}]})
    operator = {"join_balanced_s": 1.0, "stages": {"join": {"wake_to_decision": figure}}}
    assert "| join |" in recordviews.operator_stages(operator).splitlines()[0] + " |"
    assert "stages" not in recordviews.operator(operator)


def test_a_release_at_shutdown_is_timed_from_its_final_checkpoint_to_the_operator() -> None:
    """A deleted pod releases on SIGTERM, with no revocation written: its acknowledgement
    still counts, from its final checkpoint and to the operator's next wake."""
    owned = cm("p-1", 4, {"3": (1, "owned")}, applied=4)
    released = cm("p-1", 4, {"3": (1, "owned")}, applied=4, released={"3": 1})
    deleting = pod("p-1", ready=True)
    deleting["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    pods, maps = stagerecords.commits(
        [
            ("MODIFIED", deleting, pod("p-1", ready=True), T),
            ("MODIFIED", released, owned, T + 0.200),
        ]
    )
    events = list(
        stagerecords.pod_events(
            "p-1", [pod_line(T + 0.150, partitions.FINAL_CHECKPOINT, "3", 1, 9, 140)]
        )
    )
    cycles_ = [stagerecords.cycle_of(cycle_line(T + 0.260, 5.0, 0, 0.0))]
    found = stages.durations(
        stages.Records(pods=pods, maps=maps, cycles=[c for c in cycles_ if c], pod_events=events),
        SCOPE,
        start=T - 1,
        end=T + 1,
    )
    got = {k: [round(v * 1000) for v in values] for k, values in found.items()}
    assert got == {
        "pod_change_to_wake": [260],
        "final_checkpoint_to_acknowledgement": [50],
        "acknowledgement_to_seen": [60],
    }


def test_cycle_records_keep_the_newest_when_never_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark's operator process that is never asked for its cycle lines keeps a bounded
    number of them, the newest."""
    monkeypatch.setattr(stagerecords, "CYCLES_KEPT", 3)
    logger = logging.getLogger(cycles.__name__)
    with stagerecords.CycleRecords() as records:
        for i in range(5):
            logger.debug(
                cycles.CYCLE_TIMES, "shop", f"c{i}", "2026-11-27T12:00:00+00:00", 1.0, 0, 0.0
            )
        taken = records.take()
        assert [c.consumer for c in taken] == ["c2", "c3", "c4"]
        assert records.take() == []


def test_owner_changes_count_each_new_epoch_and_name_the_partitions_moved_twice() -> None:
    """Partition 3 goes to p-2 (one change); partition 4 goes to p-2 and then on to p-3
    within the same step (moved twice); a ConfigMap rewritten without a new epoch counts
    nothing."""
    b1 = cm("p-2", 1, {}, applied=1)
    b2 = cm("p-2", 2, {"3": (2, "owned"), "4": (2, "owned")}, applied=1)
    b3 = cm("p-2", 3, {"3": (2, "owned")}, applied=2)
    c1 = cm("p-3", 1, {}, applied=1)
    c2 = cm("p-3", 2, {"4": (3, "owned")}, applied=1)
    c3 = cm("p-3", 2, {"4": (3, "owned")}, applied=2)
    writes = [
        ("MODIFIED", b2, b1, T + 0.1),
        ("MODIFIED", b3, b2, T + 0.2),
        ("MODIFIED", c2, c1, T + 0.3),
        ("MODIFIED", c3, c2, T + 0.4),
    ]
    pods, maps = stagerecords.commits(writes)
    records = stages.Records(pods=pods, maps=maps, cycles=[])
    assert stages.owner_changes(records, SCOPE, start=T, end=T + 1) == {
        "count": 3,
        "moved_twice": ["4"],
    }
    assert stages.owner_changes(records, SCOPE, start=T + 0.25, end=T + 1) == {
        "count": 1,
        "moved_twice": [],
    }
