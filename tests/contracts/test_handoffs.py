"""The hand-off table: complete, consistent with its own rules, and legal moves only.

Plain functions over data, no fixtures (the table is the model: h11's state tests).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from eventhub_balancer import handoffs
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def test_every_state_and_standing_has_a_fate() -> None:
    pairs = set(itertools.product(handoffs.PARTITION_STATES, handoffs.STANDINGS))
    assert set(handoffs.FATES) == pairs


def test_a_gone_owner_never_holds_a_partition_up() -> None:
    for state in handoffs.PARTITION_STATES:
        fate, reason = handoffs.fate(state, "gone")
        assert fate == "free"
        assert reason == ("new" if state == "unowned" else "gone")


def test_a_hand_off_in_flight_waits_for_its_owner_whatever_it_does() -> None:
    for standing in ("live", "held", "draining"):
        assert handoffs.fate("revoking", standing) == ("wait", None)


def test_only_a_free_partition_changes_epoch() -> None:
    fates = {fate for fate, _ in handoffs.FATES.values()}
    assert {f for f in fates if handoffs.EPOCH_STEP[f]} == {"free"}
    assert handoffs.EPOCH_STEP["free"] == 1


@pytest.mark.parametrize("step", [1, 3])
def test_the_epoch_step_is_what_a_decision_gives_out(
    step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table is the rule: a partition given out new, taken over from a gone pod, or moved
    to new coordinates rises by the table's step for ``free``, whatever that is."""
    monkeypatch.setattr(handoffs, "EPOCH_STEP", {**handoffs.EPOCH_STEP, "free": step})
    observation = bodies.observe(pods=[pod("a"), pod("b")], ids=("0", "1"))
    observation, first = bodies.decide_fully(observation, now=at(0))
    assert dict(first.epochs or {}) == {"0": step, "1": step}
    observation = bodies.applied(observation, first)
    owners = {o: p for o, parts in bodies.assignment(observation).items() for p in parts}
    gone = dataclasses.replace(
        observation, pods=tuple(p for p in observation.pods if p["metadata"]["name"] != "a")
    )
    _, takeover = bodies.decide_fully(gone, now=at(5))
    assert [(m.partition, m.epoch) for m in takeover.moves] == [(owners["a"], 2 * step)]
    moved = bodies.applied(observation, bodies.decide(observation, now=at(5)))
    spec = {**bodies.SPEC, "eventHub": {**bodies.SPEC["eventHub"], "name": "orders-v2"}}
    renamed = dataclasses.replace(moved, spec=bodies.observe(pods=[], spec=spec).spec)
    raised = bodies.decide(renamed, now=at(6))
    assert dict(raised.epochs or {}) == {"0": 2 * step, "1": 2 * step}


def test_free_has_a_reason_and_nothing_else_has() -> None:
    for fate, reason in handoffs.FATES.values():
        assert (reason is not None) == (fate == "free")


@pytest.mark.parametrize(
    ("written", "acknowledged", "waited", "expected"),
    [
        (None, None, 0.0, "unowned"),
        ("owned", None, 999.0, "owned"),
        # Let go of its own accord (the read-back counts that only from a terminating pod).
        ("owned", 4, 0.0, "released"),
        ("owned", 3, 0.0, "owned"),
        ("revoking", None, 0.0, "revoking"),
        ("revoking", 3, 0.0, "revoking"),  # an older epoch's acknowledgement does not count
        ("revoking", 4, 0.0, "released"),
        ("revoking", None, 30.0, "expired"),
        ("revoking", 4, 30.0, "released"),  # an acknowledgement beats the timeout
    ],
)
def test_partition_state_reads_acknowledgements_and_the_clock(
    written: handoffs.WrittenState | None,
    acknowledged: int | None,
    waited: float,
    expected: handoffs.PartitionState,
) -> None:
    state = handoffs.partition_state(
        written, epoch=4, acknowledged=acknowledged, waited=waited, timeout=30.0
    )
    assert state == expected


def test_worker_transitions_reach_every_outcome_from_fencing() -> None:
    reachable = {"fencing"}
    frontier = ["fencing"]
    while frontier:
        state = frontier.pop()
        for (source, _), target in handoffs.WORKER_TRANSITIONS.items():
            if source == state and target not in reachable:
                reachable.add(target)
                frontier.append(target)
    assert reachable == set(handoffs.WORKER_STATES)


def test_outcomes_are_terminal() -> None:
    for (source, _), _target in handoffs.WORKER_TRANSITIONS.items():
        assert source not in handoffs.OUTCOMES


def test_the_planned_path_releases_after_the_final_checkpoint() -> None:
    state: handoffs.WorkerState = "fencing"
    for event in ("fenced", "revoked", "checkpointed"):
        state = handoffs.next_worker_state(state, event)  # type: ignore[arg-type]
    assert state == "released"


def test_an_illegal_move_raises() -> None:
    with pytest.raises(
        handoffs.IllegalTransition, match="state 'running' cannot take event 'checkpointed'"
    ):
        handoffs.next_worker_state("running", "checkpointed")
    with pytest.raises(handoffs.IllegalTransition):
        handoffs.next_worker_state("released", "revoked")


def test_ownership_lost_stops_a_worker_from_any_live_state() -> None:
    for state in ("fencing", "running", "releasing"):
        assert handoffs.next_worker_state(state, "ownership_lost") == "lost"  # type: ignore[arg-type]


def test_a_revoked_partition_that_does_not_run_is_released_at_once() -> None:
    assert handoffs.released_at_once("revoking", running=False)
    assert not handoffs.released_at_once("revoking", running=True)
    assert not handoffs.released_at_once("owned", running=False)


def test_a_pod_shutting_down_releases_the_owned_partitions_failing_that_it_does_not_run() -> None:
    assert handoffs.released_at_once("owned", running=False, failing=True, leaving=True)
    # Running (a restart attempt, a release cut short): something may still be in flight.
    assert not handoffs.released_at_once("owned", running=True, failing=True, leaving=True)
    # Not shutting down: a failing partition stays with its live pod.
    assert not handoffs.released_at_once("owned", running=False, failing=True, leaving=False)
    # Not failing and not run (lost at its epoch, say): not this pod's to let go of.
    assert not handoffs.released_at_once("owned", running=False, failing=False, leaving=True)
    assert handoffs.released_at_once("revoking", running=False, failing=False, leaving=True)
