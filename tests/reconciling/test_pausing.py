"""``spec.paused``: every partition released by ordered hand-off, none assigned, pure."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs
from eventhub_balancer.reconciling import decisions, observations
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod

PAUSED_SPEC: dict[str, Any] = {**bodies.SPEC, "paused": True}


def started(
    *pods: dict[str, Any], spec: Mapping[str, Any] = bodies.SPEC
) -> observations.Observation:
    """Two cycles in: every partition assigned, written and read back."""
    first, decision = bodies.decide_fully(bodies.observe(pods=pods, spec=spec), now=at(0))
    return bodies.applied(first, decision)


def respec(
    observation: observations.Observation, spec: Mapping[str, Any]
) -> observations.Observation:
    """The user edits the spec (a new generation), as a GitOps tool would."""
    body: Any = copy.deepcopy(observation.body)
    body["spec"] = copy.deepcopy(dict(spec))
    generation = observation.generation + 1
    body["metadata"]["generation"] = generation
    return dataclasses.replace(observation, body=body, spec=specs.parse_spec(spec))


def conditions(observation: observations.Observation) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c["reason"]) for c in observation.status.get("conditions") or []
    }


def events(decision: decisions.Decision) -> list[tuple[str, str]]:
    return [(e.reason, e.type) for e in decision.events]


def test_paused_is_parsed_with_a_default_and_a_clear_error() -> None:
    assert specs.parse_spec(bodies.SPEC).paused is False
    assert specs.parse_spec(PAUSED_SPEC).paused is True
    with pytest.raises(errors.InvalidInput) as caught:
        specs.parse_spec({**bodies.SPEC, "paused": "false"})
    assert caught.value.field == "spec.paused"
    assert "use true or false" in caught.value.problem


def test_a_pause_revokes_everything_then_leaves_it_unowned_once_released() -> None:
    observation = respec(started(pod("a"), pod("b")), PAUSED_SPEC)
    pausing = bodies.decide(observation, now=at(10))
    assert not pausing.needs_checkpoints
    assert [(m.kind, m.reason, m.target) for m in pausing.moves] == [("revoke", "drain", None)] * 4
    assert pausing.epochs is None  # nothing changes owner yet: epochs stay
    assert events(pausing) == [
        ("PartitionRevoked", "Normal"),
        ("PartitionRevoked", "Normal"),
        ("Pausing", "Normal"),
    ]
    assert "(paused)" in pausing.events[0].message
    assert pausing.figures is not None
    assert pausing.figures.paused
    assert pausing.next_in == 30.0  # the hand-off timeout applies as usual
    observation = bodies.applied(observation, pausing)
    assert bodies.assignment(observation) == {
        "a": {"0": (1, "revoking"), "1": (1, "revoking")},
        "b": {"2": (1, "revoking"), "3": (1, "revoking")},
    }
    assert conditions(observation)["Paused"] == ("False", "Pausing")
    assert conditions(observation)["Ready"] == ("False", "Pausing")
    assert (
        "4 partitions are still being released"
        in bodies.condition(observation, "Paused")["message"]
    )

    # a releases: its partitions are left without an owner; b still holds two.
    observation = bodies.acknowledged(observation, "a")
    half = bodies.decide(observation, now=at(11))
    assert [(m.partition, m.source, m.target) for m in half.moves] == [
        ("0", "a", None),
        ("1", "a", None),
    ]
    assert events(half) == [("PartitionReleased", "Normal")]
    observation = bodies.applied(observation, half)
    assert bodies.assignment(observation)["a"] == {}
    assert conditions(observation)["Paused"] == ("False", "Pausing")
    assert (
        "2 partitions are still being released"
        in bodies.condition(observation, "Paused")["message"]
    )

    observation = bodies.acknowledged(observation, "b")
    done = bodies.decide(observation, now=at(12))
    assert events(done) == [("PartitionReleased", "Normal"), ("Paused", "Normal")]
    observation = bodies.applied(observation, done)
    assert bodies.assignment(observation) == {"a": {}, "b": {}}
    assert conditions(observation) == {
        "Ready": ("True", "Paused"),
        "Balanced": ("True", "Paused"),
        "EventHubReachable": ("True", "PartitionsListed"),
        "CheckpointStoreReachable": ("True", "CheckpointsListed"),
        "PartitionsFailing": ("False", "AllPartitionsProcessing"),
        "Paused": ("True", "Paused"),
        # A paused consumer is as its spec asks: kstatus reads it as Current.
        "Reconciling": ("False", "Settled"),
        "Stalled": ("False", "NoStandingFault"),
    }
    status = observation.status
    assert status.get("assignment") == []
    assert status.get("epochs") == {"0": 1, "1": 1, "2": 1, "3": 1}  # epochs never go down
    assert [c["partitions"] for c in status.get("consumers") or []] == [[], []]

    # A steady pause writes nothing and posts nothing.
    steady = bodies.decide(observation, now=at(20))
    assert (steady.writes.count, steady.status, steady.events, steady.epochs) == (0, {}, (), None)


def test_a_pod_that_releases_in_steps_is_said_to_have_let_go_once() -> None:
    """A pod acknowledges each release as it is done. Live, a pause of two pods holding 32
    partitions posted five `PartitionReleased` Events (0-1, 2-3 and 4-15 of one pod, 16 and
    17-31 of the other) beside `PartitionRevoked`, `Pausing` and `Paused`, which say it all."""
    observation = respec(started(pod("a"), pod("b")), PAUSED_SPEC)
    observation = bodies.applied(observation, bodies.decide(observation, now=at(10)))

    observation = bodies.acknowledged(observation, "a", only={"0"})
    step = bodies.decide(observation, now=at(11))
    assert [(m.partition, m.source, m.target) for m in step.moves] == [("0", "a", None)]
    assert events(step) == []  # a still releases 1
    observation = bodies.applied(observation, step)

    observation = bodies.acknowledged(observation, "a")
    last = bodies.decide(observation, now=at(12))
    assert [(m.partition, m.source, m.target) for m in last.moves] == [("1", "a", None)]
    (said,) = last.events
    assert (said.reason, said.type) == ("PartitionReleased", "Normal")
    assert said.message == (
        "Partition 1 of a (released, the last it held) left without an owner: spec.paused is true"
    )


def test_a_pause_revokes_at_once_from_a_pod_ready_a_moment_ago() -> None:
    # A paused pod is not terminating: nothing of its own releases its partitions, so they
    # get no wait for such a release (a pod that is deleted does).
    observation = respec(started(pod("a", since=9.5), pod("b", since=9.9)), PAUSED_SPEC)
    pausing = bodies.decide(observation, now=at(10))
    assert [(m.kind, m.reason) for m in pausing.moves] == [("revoke", "drain")] * 4


def test_a_pod_that_does_not_release_is_left_behind_at_the_timeout() -> None:
    observation = respec(started(pod("a")), PAUSED_SPEC)
    observation = bodies.applied(observation, bodies.decide(observation, now=at(10)))
    waiting = bodies.decide(observation, now=at(39))
    assert (waiting.moves, waiting.next_in) == ((), 1.0)
    timed_out = bodies.decide(observation, now=at(40))
    assert events(timed_out) == [("HandoffTimedOut", "Warning"), ("Paused", "Normal")]
    assert "fences a out" in timed_out.events[0].message
    observation = bodies.applied(observation, timed_out)
    assert bodies.assignment(observation) == {"a": {}}
    assert conditions(observation)["Paused"] == ("True", "Paused")


def test_pods_that_join_or_fail_while_paused_get_nothing_and_hold_nothing() -> None:
    observation = respec(started(pod("a"), pod("b"), pod("c")), PAUSED_SPEC)
    # c died long ago (gone: freed at once), b is NotReady within the grace (drained anyway),
    # d is new.
    observation = bodies.with_pods(
        observation, pod("b", ready=False, since=5), pod("c", ready=False, since=-100), pod("d")
    )
    decision = bodies.decide(observation, now=at(10))
    assert {(m.source, m.kind, m.target) for m in decision.moves} == {
        ("a", "revoke", None),
        ("b", "revoke", None),
        ("c", "takeover", None),
    }
    assert not any(m.target for m in decision.moves)


def test_a_consumer_paused_from_the_start_assigns_nothing_and_is_paused_at_once() -> None:
    observation = bodies.observe(pods=[pod("a")], spec=PAUSED_SPEC)
    decision = bodies.decide(observation, now=at(0))
    assert (decision.needs_checkpoints, decision.moves, decision.epochs) == (False, (), None)
    assert events(decision) == [("Paused", "Normal")]
    observation = bodies.applied(observation, decision)
    assert conditions(observation)["Paused"] == ("True", "Paused")
    assert conditions(observation)["Ready"] == ("True", "Paused")


def test_a_pause_by_lag_weighting_drains_as_well() -> None:
    spec = {**bodies.SPEC, "balancing": {"weighting": "lag"}}
    observation = respec(started(pod("a"), pod("b"), spec=spec), {**spec, "paused": True})
    decision = bodies.decide(observation, now=at(10))
    assert [(m.kind, m.target) for m in decision.moves] == [("revoke", None)] * 4


def paused_a_and_b() -> observations.Observation:
    """a and b paused at 10, their partitions released at 11: nobody holds any."""
    observation = respec(started(pod("a"), pod("b")), PAUSED_SPEC)
    observation = bodies.applied(observation, bodies.decide(observation, now=at(10)))
    for name in ("a", "b"):
        observation = bodies.acknowledged(observation, name)
    return bodies.applied(observation, bodies.decide(observation, now=at(11)))


def test_resuming_assigns_again_with_higher_epochs() -> None:
    observation = paused_a_and_b()
    assert conditions(observation)["Paused"] == ("True", "Paused")

    observation = respec(observation, bodies.SPEC)
    observation, resumed = bodies.decide_fully(observation, now=at(20))
    assert resumed.epochs == {"0": 2, "1": 2, "2": 2, "3": 2}
    assert ("Resumed", "Normal") in events(resumed)
    observation = bodies.applied(observation, resumed)
    assert bodies.assignment(observation) == {
        "a": {"0": (2, "owned"), "1": (2, "owned")},
        "b": {"2": (2, "owned"), "3": (2, "owned")},
    }
    assert conditions(observation)["Paused"] == ("False", "Resumed")
    assert conditions(observation)["Ready"] == ("True", "AllPartitionsOwned")
    assert bodies.decide(observation, now=at(25)).events == ()


def test_a_pod_starting_when_the_consumer_resumes_gets_its_share_when_ready() -> None:
    # Scaled up during the pause; c is still starting when the consumer resumes.
    observation = bodies.with_pods(paused_a_and_b(), pod("c", ready=False, since=19))
    observation = respec(observation, bodies.SPEC)
    observation, resumed = bodies.decide_fully(observation, now=at(20))
    observation = bodies.applied(observation, resumed)
    held = bodies.assignment(observation)
    assert {name: len(ps) for name, ps in held.items()} == {"a": 2, "b": 1, "c": 0}
    assert conditions(observation)["Balanced"] == ("False", "PodsStarting")
    observation = bodies.with_pods(observation, pod("c", since=21))
    observation, joined = bodies.decide_fully(observation, now=at(21))
    # c takes what waited for it: nothing passes through a or b on its way to c.
    assert [(m.kind, m.source, m.target) for m in joined.moves] == [("assign", None, "c")]
    assert joined.balanced


def test_a_consumer_never_paused_says_so_and_posts_nothing_about_it() -> None:
    first, decision = bodies.decide_fully(bodies.observe(pods=[pod("a")]), now=at(0))
    assert not {"Pausing", "Paused", "Resumed"} & {e.reason for e in decision.events}
    assert conditions(bodies.applied(first, decision))["Paused"] == ("False", "NotPaused")
    assert decision.figures is not None
    assert not decision.figures.paused


def test_a_single_partition_is_spoken_of_in_the_singular_while_pausing() -> None:
    first, decision = bodies.decide_fully(bodies.observe(pods=[pod("a")], ids=("0",)), now=at(0))
    observation = respec(bodies.applied(first, decision), PAUSED_SPEC)
    observation = bodies.applied(observation, bodies.decide(observation, now=at(10)))
    assert bodies.condition(observation, "Paused")["message"] == (
        "spec.paused is true: 1 partition is still being released by ordered hand-off"
    )
    assert bodies.condition(observation, "Ready")["message"] == (
        "spec.paused is true: 1 of 1 partition is being released"
    )
    observation = bodies.acknowledged(observation, "a")
    observation = bodies.applied(observation, bodies.decide(observation, now=at(11)))
    assert bodies.condition(observation, "Ready")["message"] == (
        "spec.paused is true: the only partition is released and none is assigned; set "
        "spec.paused to false to resume"
    )


def test_one_partition_of_many_still_released_is_one_partition() -> None:
    observation = respec(started(pod("a"), pod("b"), pod("c"), pod("d")), PAUSED_SPEC)
    observation = bodies.applied(observation, bodies.decide(observation, now=at(10)))
    for name in ("a", "b", "c"):
        observation = bodies.acknowledged(observation, name)
    observation = bodies.applied(observation, bodies.decide(observation, now=at(11)))
    assert bodies.condition(observation, "Paused")["message"].startswith(
        "spec.paused is true: 1 partition is still being released"
    )
    assert bodies.condition(observation, "Ready")["message"] == (
        "spec.paused is true: 1 of 4 partitions is being released"
    )
