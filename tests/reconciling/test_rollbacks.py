"""A status written back to an earlier time (a restore, an apply of ``status:``), pure.

The operator decides over the status it read or wrote before, writes it back over the one it
finds, and moves nothing (`reconciling.rollbacks`). Without it, the earlier record undid the
hand-offs made since: partitions taken from the pods that run them, given again at epochs
given out already, and their ConfigMaps reported as tampered with.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from eventhub_balancer.reconciling import deciding, decisions, observations, rollbacks
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def versioned(observation: observations.Observation, version: int, **status: Any) -> Any:
    """``observation`` at resourceVersion ``version``, its status replaced when given."""
    body: Any = copy.deepcopy(dict(observation.body))
    body["metadata"]["resourceVersion"] = str(version)
    if status:
        body["status"] = copy.deepcopy(status["status"])
    return dataclasses.replace(observation, body=body)


def settle(observation: observations.Observation, *, now: float) -> observations.Observation:
    """Decide, write and acknowledge until nothing is left to write."""
    for step in range(10):
        observation, decision = bodies.decide_fully(observation, now=at(now + step))
        if not (decision.writes.count or decision.epochs or decision.status):
            return observation
        observation = bodies.applied(observation, decision)
        for name in bodies.assignment(observation):
            observation = bodies.acknowledged(observation, name)
    raise AssertionError("no steady state in 10 decisions")


def test_a_status_written_back_to_before_a_handoff_is_put_back_and_nothing_moves() -> None:
    two = settle(bodies.observe(pods=[pod("a"), pod("b")]), now=0)
    earlier = copy.deepcopy(dict(two.status))
    three = versioned(settle(bodies.with_pods(two, pod("c")), now=10), 20)
    assert set(three.status["epochs"].values()) == {1, 2}
    _, carry = deciding.decide(three, None, now=at(30))

    # A restore writes the status of two pods back (a later version of the same object).
    restored = versioned(three, 30, status=earlier)
    decision, carry = deciding.decide(restored, carry, now=at(31))
    assert decision.moves == ()
    assert decision.writes.count == 0, "a ConfigMap was rewritten"
    assert [e.reason for e in decision.events] == [rollbacks.REASON]
    assert [e.type for e in decision.events] == ["Warning"]
    assert "status.epochs went back for partitions" in decision.events[0].message
    assert decision.resource_version == "30"  # the write is conditioned on the status found
    written = bodies.applied(restored, decision)
    assert written.status["epochs"] == three.status["epochs"]
    assert written.status["assignment"] == three.status["assignment"]

    # Once written back, the next version decides as before: no Event, no write.
    again, _ = deciding.decide(versioned(written, 40), carry, now=at(32))
    assert (again.events, again.writes.count, again.epochs) == ((), 0, None)


def test_without_the_status_read_before_the_earlier_record_would_undo_the_handoff() -> None:
    """What an operator started after the restore does: it knows no other status."""
    two = settle(bodies.observe(pods=[pod("a"), pod("b")]), now=0)
    earlier = copy.deepcopy(dict(two.status))
    three = versioned(settle(bodies.with_pods(two, pod("c")), now=10), 20)
    cold, _ = deciding.decide(versioned(three, 30, status=earlier), None, now=at(31))
    assert "AssignmentTampered" in {e.reason for e in cold.events}


def test_an_older_version_or_another_object_is_no_rollback() -> None:
    two = settle(bodies.observe(pods=[pod("a"), pod("b")]), now=0)
    earlier = copy.deepcopy(dict(two.status))
    three = versioned(settle(bodies.with_pods(two, pod("c")), now=10), 20)
    remembered = decisions.read_record(None, three.body)
    # A stale read (a lower version) is refused by the write's precondition, not put back.
    stale = versioned(three, 15, status=earlier)
    assert rollbacks.restored(remembered, stale) == (stale, None)
    # The same name created again (another uid) starts from its own status.
    other = versioned(three, 30, status=earlier)
    other.body["metadata"]["uid"] = "uid-other"
    assert rollbacks.restored(remembered, other) == (other, None)


def test_a_rollback_is_put_back_by_every_decision_until_the_write_lands() -> None:
    """A cycle decides twice when it reads more (the blobs, the pods afresh), and a put-back
    refused by a 409 is decided again in the next cycle, each time over the status found:
    every one of those decisions writes the operator's status back. The carry of the first
    once held the status found with the operator's record in it, so the second took the
    rolled-back record for its own and took the hand-offs back."""
    two = settle(bodies.observe(pods=[pod("a"), pod("b")]), now=0)
    earlier = copy.deepcopy(dict(two.status))
    three = versioned(settle(bodies.with_pods(two, pod("c")), now=10), 20)
    _, carry = deciding.decide(three, None, now=at(30))
    restored = versioned(three, 30, status=earlier)
    for step in range(3):
        decision, carry = deciding.decide(restored, carry, now=at(31 + step))
        assert decision.moves == (), step
        assert decision.writes.count == 0, f"decision {step} rewrote a ConfigMap"
        assert [e.reason for e in decision.events] == [rollbacks.REASON], step
        written = bodies.applied(restored, decision)
        assert written.status["assignment"] == three.status["assignment"], step
