"""What a pod logs of its assignment and its acknowledgements: partitions a person reads,
folded into runs as ``ehb status`` lists them (`partitionlists`).

The lines were Python reprs, ``{'0': (1, 'owned'), '1': (1, 'owned'), ...}``: 64 tuples for a
pod of 64 partitions, and the released ones as ``{'3': 2}``, whose number said nothing of
being an epoch.
"""

from __future__ import annotations

import logging

import pytest

from eventhub_balancer.consumer import acknowledgements, assignments
from eventhub_balancer.contracts import podassignments
from eventhub_balancer.contracts.partitionreports import PartitionReport, ReportState
from eventhub_balancer.contracts.podassignments import PartitionEntry


def test_an_assignment_is_said_by_state_with_its_epochs() -> None:
    partitions = {
        "10": PartitionEntry(epoch=3),
        "2": PartitionEntry(epoch=3),
        "4": PartitionEntry(epoch=4, state="revoking"),
        "0": PartitionEntry(epoch=1),
        "7": PartitionEntry(epoch=2, state="revoking"),
    }
    assert podassignments.described(partitions) == (
        "owned 0,2,10 (epochs 1,3); revoking 4,7 (epochs 2,4)"
    )


def test_a_run_and_its_one_epoch_are_said_once() -> None:
    partitions = {str(p): PartitionEntry(epoch=5) for p in range(64)}
    assert podassignments.described(partitions) == "owned 0-63 (epoch 5)"


def test_an_empty_assignment() -> None:
    assert podassignments.described({}) == "no partitions"


def test_the_released_partitions_with_their_epochs() -> None:
    assert acknowledgements.released_text({"12": 2, "3": 2, "4": 3}) == "3-4,12 (epochs 2-3)"
    assert acknowledgements.released_text({}) == "nothing"


def test_the_reported_partitions_by_state() -> None:
    def report(partition: str, state: ReportState, attempts: int = 0) -> PartitionReport:
        return PartitionReport(partition=partition, epoch=2, state=state, attempts=attempts)

    reports = {
        **{str(p): report(str(p), "failing", attempts=p) for p in range(1, 4)},
        "7": report("7", "stuck"),
        "9": report("9", "parked", attempts=1),
    }
    assert acknowledgements.reports_text(reports) == (
        "failing 1-3 (epoch 2, up to 3 attempts); parked 9 (epoch 2, up to 1 attempt); "
        "stuck 7 (epoch 2)"
    )
    assert acknowledgements.reports_text({}) == "none"


async def test_reports_are_logged_at_info_when_a_partition_changes_state_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pod with a missing hub logged ``reported partitions: failing 16-21 (epoch 3, up to N
    attempts)`` at INFO twice at each restart, every 30 s for as long as the hub was
    missing; the attempts are in the operator's status and the pod's metrics."""
    caplog.set_level(logging.DEBUG, logger=acknowledgements.__name__)
    acks = acknowledgements.Acknowledgements(assignments.MemorySource(), min_interval=0)

    def failing(attempts: int, state: ReportState = "failing") -> dict[str, PartitionReport]:
        return {
            p: PartitionReport(partition=p, epoch=3, state=state, attempts=attempts, error="E")
            for p in ("16", "17")
        }

    for reports in ({}, failing(1), failing(2), failing(3), failing(3, "parked"), {}):
        await acks.write(applied_generation=1, released={}, reports=reports)
    said = [
        (r.levelname, r.getMessage().removeprefix("reported partitions: "))
        for r in caplog.records
        if r.getMessage().startswith("reported partitions")
    ]
    assert said == [
        ("DEBUG", "none"),
        ("INFO", "failing 16-17 (epoch 3, up to 1 attempt)"),
        ("DEBUG", "failing 16-17 (epoch 3, up to 2 attempts)"),
        ("DEBUG", "failing 16-17 (epoch 3, up to 3 attempts)"),
        ("INFO", "parked 16-17 (epoch 3, up to 3 attempts)"),
        ("INFO", "none"),
    ]
