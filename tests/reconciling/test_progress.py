"""Reconciling and Stalled follow from the conditions a cycle wrote, pure."""

from __future__ import annotations

import pytest

from eventhub_balancer.contracts import conditions, statusbodies
from eventhub_balancer.reconciling import progress
from tests.reconciling.bodies import T0


def written(**by_type: tuple[str, str]) -> list[statusbodies.ConditionBody]:
    """A conditions list: type -> (status, reason)."""
    return conditions.apply(
        None,
        [
            conditions.Condition(type=t, status=s, reason=r, message=f"{t} says {r}")  # type: ignore[arg-type]
            for t, (s, r) in by_type.items()
        ],
        observed_generation=1,
        now=T0,
    )


def summary(current: list[statusbodies.ConditionBody]) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in progress.concluded(current)}


def test_a_settled_consumer_is_neither_reconciling_nor_stalled() -> None:
    found = summary(written(Ready=("True", "AllPartitionsOwned"), Balanced=("True", "Balanced")))
    assert found["Reconciling"][:2] == ("False", "Settled")
    assert found["Stalled"][:2] == ("False", "NoStandingFault")


@pytest.mark.parametrize(
    ("ready", "balanced"),
    [
        (("True", "AllPartitionsOwned"), ("False", "HandoffsInFlight")),
        (("False", "PartitionsWithoutReadyOwner"), ("False", "PodsStarting")),
        (("False", "NoReadyPods"), ("False", "NoReadyPods")),
        (("False", "Pausing"), ("False", "Pausing")),
    ],
)
def test_work_that_settles_by_itself_is_reconciling_with_its_own_words(
    ready: tuple[str, str], balanced: tuple[str, str]
) -> None:
    found = summary(written(Ready=ready, Balanced=balanced))
    first = ready if ready[0] != "True" else balanced
    kind = "Ready" if ready[0] != "True" else "Balanced"
    assert found["Reconciling"] == ("True", first[1], f"{kind} says {first[1]}")
    assert found["Stalled"][0] == "False"


@pytest.mark.parametrize(
    "reason",
    ["InvalidSpec", "EventHubUnusable", "CheckpointStoreUnusable", "AllPartitionsFailing"],
)
def test_what_waits_for_a_person_is_stalled(reason: str) -> None:
    found = summary(written(Ready=("False", reason), Balanced=("False", "NoReadyPods")))
    assert found["Stalled"] == ("True", reason, f"Ready says {reason}")
    assert found["Reconciling"][:2] == ("False", "Stalled")


def test_no_partition_list_is_stalled_only_when_event_hubs_refuses_for_good() -> None:
    refused = written(
        Ready=("False", "PartitionsUnknown"), EventHubReachable=("False", "EventHubNotFound")
    )
    assert summary(refused)["Stalled"][:2] == ("True", "EventHubNotFound")
    unreachable = written(
        Ready=("False", "PartitionsUnknown"), EventHubReachable=("False", "EventHubUnreachable")
    )
    assert summary(unreachable)["Stalled"][0] == "False"
    assert summary(unreachable)["Reconciling"][:2] == ("True", "PartitionsUnknown")


def test_applied_writes_both_beside_the_others_and_keeps_their_transition_times() -> None:
    ready = conditions.Condition(type="Ready", status="True", reason="Owned", message="")
    first = progress.applied(
        None,
        [ready],
        observed_generation=1,
        now=T0,
    )
    assert {c["type"] for c in first} == {"Ready", "Reconciling", "Stalled"}
    later = T0.replace(minute=5)
    again = progress.applied(first, [], observed_generation=2, now=later)
    assert [c["lastTransitionTime"] for c in again] == [c["lastTransitionTime"] for c in first]


@pytest.mark.parametrize("reason", ["Paused", "ScaledToZero"])
def test_a_settled_consumer_that_owns_nothing_does_not_say_every_partition_is_owned(
    reason: str,
) -> None:
    """A paused consumer, or one its autoscaler scaled to zero, is settled with no partition
    owned: `kubectl describe` showed Reconciling's "every partition is owned by a Ready pod"
    beside Paused's "no pod holds a partition". Its message repeats what Ready says."""
    found = summary(written(Ready=("True", reason), Balanced=("True", reason)))
    status, settled, message = found["Reconciling"]
    assert (status, settled) == ("False", "Settled")
    assert "owned" not in message
    assert f"Ready says {reason}" in message
