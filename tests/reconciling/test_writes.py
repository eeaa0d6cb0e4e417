"""`writes.starts_handoff` and `writes.takes_nothing`: which ConfigMap changes only ask for a
release, or only let go of what the pod released (both written with the gains)."""

from __future__ import annotations

from eventhub_balancer.contracts import podassignments
from eventhub_balancer.reconciling import writes

OWNED = podassignments.PartitionEntry(epoch=3)
REVOKING = podassignments.PartitionEntry(epoch=3, state="revoking")


def test_marking_an_owned_partition_revoking_starts_a_handoff() -> None:
    assert writes.starts_handoff({"0": OWNED, "1": OWNED}, {"0": OWNED, "1": REVOKING})


def test_a_revocation_that_was_already_written_starts_nothing() -> None:
    assert not writes.starts_handoff({"1": REVOKING}, {"1": REVOKING})


def test_a_change_that_takes_a_partition_away_waits_for_the_gains() -> None:
    # The pod would stop 0 before its next owner was told: not with the gains.
    assert not writes.starts_handoff({"0": OWNED, "1": OWNED}, {"1": REVOKING})


def test_a_revocation_at_another_epoch_is_no_plain_release_request() -> None:
    assert not writes.starts_handoff(
        {"1": OWNED}, {"1": podassignments.PartitionEntry(epoch=4, state="revoking")}
    )


def test_gaining_alone_is_not_a_revocation() -> None:
    assert not writes.starts_handoff(
        {"0": OWNED}, {"0": OWNED, "1": podassignments.PartitionEntry(epoch=1)}
    )


def test_dropping_what_the_pod_released_still_starts_a_handoff() -> None:
    # b released 7 (its acknowledgement) and is asked for 6 in the same write: it takes away
    # nothing b still runs, so it goes with the gains.
    before = {"6": OWNED, "7": REVOKING}
    assert writes.starts_handoff(before, {"6": REVOKING}, released={"7": 3})


def test_dropping_what_the_pod_did_not_release_waits_for_the_gains() -> None:
    before = {"6": OWNED, "7": REVOKING}
    assert not writes.starts_handoff(before, {"6": REVOKING})
    # A release of another epoch is not a release of what the write drops.
    assert not writes.starts_handoff(before, {"6": REVOKING}, released={"7": 2})
    assert not writes.starts_handoff(before, {"6": REVOKING}, released={"6": 3})


def test_dropping_released_partitions_alone_starts_nothing() -> None:
    assert not writes.starts_handoff({"6": OWNED, "7": REVOKING}, {"6": OWNED}, released={"7": 3})


def test_dropping_released_partitions_alone_takes_nothing() -> None:
    # A terminating pod's own release, or an acknowledged hand-off: the pod stopped 7.
    assert writes.takes_nothing({"6": OWNED, "7": REVOKING}, {"6": OWNED}, released={"7": 3})
    assert writes.takes_nothing({"7": OWNED}, {}, released={"7": 3})


def test_dropping_what_the_pod_may_still_run_takes_something() -> None:
    assert not writes.takes_nothing({"6": OWNED, "7": REVOKING}, {"6": OWNED})
    assert not writes.takes_nothing({"7": REVOKING}, {}, released={"7": 2})
    assert not writes.takes_nothing({"6": OWNED, "7": OWNED}, {}, released={"7": 3})


def test_a_change_that_drops_nothing_is_no_letting_go() -> None:
    assert not writes.takes_nothing({"6": OWNED}, {"6": OWNED, "7": OWNED})
