"""`deciding.decide`: one cycle's whole decision, data in and data out, at a given ``now``."""

from __future__ import annotations

import dataclasses
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.reconciling import observations
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod
from tests.reconciling.test_pausing import respec


def started(*pods: dict[str, Any]) -> observations.Observation:
    """Two cycles in: every partition assigned, written and read back."""
    first, decision = bodies.decide_fully(bodies.observe(pods=pods), now=at(0))
    return bodies.applied(first, decision)


def test_a_fresh_start_reads_the_blobs_before_giving_partitions_out() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")])
    first = bodies.decide(observation, now=at(0))
    assert first.needs_checkpoints
    second = bodies.decide(bodies.read_blobs(observation, {}), now=at(0))
    assert not second.needs_checkpoints
    assert second.epochs == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert [(w.pod, w.create, w.gains) for w in second.writes.maps] == [
        ("a", True, True),
        ("b", True, True),
    ]
    assert [e.reason for e in second.events] == ["PartitionAssigned", "PartitionAssigned"]
    after = bodies.applied(observation, second)
    assert bodies.assignment(after) == {
        "a": {"0": (1, "owned"), "1": (1, "owned")},
        "b": {"2": (1, "owned"), "3": (1, "owned")},
    }
    assert bodies.condition(after, "Ready")["reason"] == "AllPartitionsOwned"


def test_checkpoint_epochs_are_a_floor_for_the_new_owners() -> None:
    observation = bodies.observe(pods=[pod("a")])
    _, decision = bodies.decide_fully(observation, now=at(0), checkpoints={"2": (7, 100)})
    assert decision.epochs == {"0": 1, "1": 1, "2": 8, "3": 1}


def test_a_steady_state_decides_no_write_and_no_second_read() -> None:
    # Steady: each pod applied what it was given (`ehb consume` says so within a second).
    observation = bodies.applying(started(pod("a"), pod("b")), "a")
    observation = bodies.applying(observation, "b")
    decision = bodies.decide(observation, now=at(5))
    assert not decision.needs_checkpoints
    assert (decision.epochs, decision.writes.count, decision.status, decision.events) == (
        None,
        0,
        {},
        (),
    )
    assert decision.next_in is None
    assert decision.pods == {"a", "b"}
    assert bodies.decide(observation, now=at(5)) == decision  # the same input, the same answer


def test_an_invalid_spec_is_reported_once_and_nothing_else_is_written() -> None:
    spec = {**bodies.SPEC, "checkpointStore": {"containerName": "X"}}
    observation = bodies.observe(pods=[pod("a")], spec=spec)
    decision = bodies.decide(observation, now=at(0))
    assert decision.spec_error is not None
    assert "spec.checkpointStore" in decision.spec_error
    assert decision.writes.count == 0
    assert decision.epochs is None
    assert [(e.reason, e.type) for e in decision.events] == [("InvalidSpec", "Warning")]
    after = bodies.applied(observation, decision)
    assert bodies.condition(after, "Ready")["status"] == "False"
    again = bodies.decide(after, now=at(5))
    assert (again.events, again.status) == ((), {})


def test_a_notready_pod_keeps_its_partitions_for_the_grace_period() -> None:
    observation = started(pod("a"), pod("b"))
    observation = bodies.with_pods(observation, pod("a", ready=False, since=10))
    held = bodies.decide(observation, now=at(29))
    assert held.moves == ()
    assert held.next_in == 1.0  # podGraceSeconds 20 after the pod became NotReady at 10
    _, gone = bodies.decide_fully(observation, now=at(30))
    assert [(m.kind, m.reason, m.source, m.target, m.epoch) for m in gone.moves] == [
        ("takeover", "gone", "a", "b", 2),
        ("takeover", "gone", "a", "b", 2),
    ]


def test_a_handoff_waits_for_the_release_until_its_timeout() -> None:
    observation = started(pod("a"))
    observation = bodies.with_pods(observation, pod("b", since=100))
    _, revoke = bodies.decide_fully(observation, now=at(100))
    assert [(m.kind, m.partition) for m in revoke.moves] == [("revoke", "2"), ("revoke", "3")]
    assert revoke.next_in == 30.0  # handoffTimeoutSeconds
    observation = bodies.applied(observation, revoke)
    assert bodies.assignment(observation)["a"]["2"] == (1, "revoking")
    waiting = bodies.decide(observation, now=at(129))
    assert (waiting.moves, waiting.next_in) == ((), 1.0)
    _, timed_out = bodies.decide_fully(observation, now=at(130))
    assert [(m.reason, m.target, m.epoch) for m in timed_out.moves] == [
        ("timeout", "b", 2),
        ("timeout", "b", 2),
    ]
    assert [e.reason for e in timed_out.events] == ["HandoffTimedOut"]
    # b gains before a loses: a crash in between leaves a duplicate claim, never a lost one
    assert [(w.pod, w.gains) for w in timed_out.writes.maps] == [("b", True), ("a", False)]


def test_a_release_ends_the_handoff_at_once() -> None:
    observation = started(pod("a"))
    observation = bodies.with_pods(observation, pod("b", since=100))
    _, revoke = bodies.decide_fully(observation, now=at(100))
    observation = bodies.acknowledged(bodies.applied(observation, revoke), "a")
    _, handed = bodies.decide_fully(observation, now=at(101))
    assert [(m.reason, m.epoch) for m in handed.moves] == [("released", 2), ("released", 2)]
    assert [e.reason for e in handed.events] == ["PartitionHandedOff"]
    assert handed.figures is not None
    assert handed.figures.handoffs == (("released", 1.0), ("released", 1.0))


def test_a_hub_fault_keeps_the_assignment_and_is_reported_when_it_starts() -> None:
    observation = started(pod("a"), pod("b"))
    fault = observations.Fault.of(errors.TransientError("AMQP connection refused"))
    failing = dataclasses.replace(observation, hub=observations.HubRead(ids=None, fault=fault))
    decision = bodies.decide(failing, now=at(5))
    assert decision.moves == ()
    assert decision.writes.count == 0
    assert decision.partitions == ("0", "1", "2", "3")  # those already assigned
    assert [(e.reason, e.type) for e in decision.events] == [("EventHubUnreachable", "Warning")]
    failing = bodies.applied(failing, decision)
    reachable = bodies.condition(failing, "EventHubReachable")
    assert reachable["status"] == "False"
    assert "over the partitions already assigned" in reachable["message"]
    assert bodies.decide(failing, now=at(10)).events == ()
    recovered = dataclasses.replace(failing, hub=observations.HubRead(ids=bodies.IDS))
    assert [e.reason for e in bodies.decide(recovered, now=at(15)).events] == ["EventHubReachable"]


def test_a_misconfigured_hub_says_so() -> None:
    observation = bodies.observe(pods=[pod("a")], ids=None)
    fault = observations.Fault.of(errors.ConfigurationError("no such namespace"))
    failing = dataclasses.replace(observation, hub=observations.HubRead(ids=None, fault=fault))
    decision = bodies.decide(failing, now=at(0))
    assert [e.reason for e in decision.events] == ["EventHubMisconfigured"]
    assert decision.partitions == ()  # never listed, nothing assigned: nothing to plan over


def test_partitions_assigned_but_not_listed_are_kept() -> None:
    observation = started(pod("a"), pod("b"))
    shorter = dataclasses.replace(observation, hub=observations.HubRead(ids=("0", "1")))
    decision = bodies.decide(shorter, now=at(5))
    assert decision.unlisted == ("2", "3")
    assert decision.moves == ()


def test_lag_weighting_needs_both_ends_and_spreads_the_backlog() -> None:
    spec = {**bodies.SPEC, "balancing": {"weighting": "lag"}}
    observation = bodies.observe(pods=[pod("a"), pod("b")], spec=spec)
    first = bodies.decide(observation, now=at(0))
    assert first.needs_checkpoints
    assert first.needs_last_sequences
    # Partition 0 is 2,999 events behind (more than a pod has in flight), the others none.
    observation = dataclasses.replace(
        bodies.read_blobs(observation, {p: (0, 0) for p in bodies.IDS}),
        last_sequences=bodies.ends({"0": 2_999, "1": 0, "2": 0, "3": 0}),
    )
    decision = bodies.decide(observation, now=at(0))
    owned = bodies.assignment(bodies.applied(observation, decision))
    # By count each pod would get two partitions; by lag the backlog has a pod to itself.
    assert owned == {
        "a": {"0": (1, "owned")},
        "b": {"1": (1, "owned"), "2": (1, "owned"), "3": (1, "owned")},
    }


def test_lag_weighting_goes_on_from_the_last_checkpoints_while_the_store_is_down() -> None:
    spec = {**bodies.SPEC, "balancing": {"weighting": "lag"}}
    observation = bodies.observe(pods=[pod("a"), pod("b")], spec=spec)
    fault = observations.Fault.of(errors.TransientError("storage account unreachable"))
    # The store cannot be read now; its last read said every checkpoint is at 0.
    observation = dataclasses.replace(
        observation,
        store=observations.StoreRead(
            fault=fault, listed=False, known_sequences={p: 0 for p in bodies.IDS}
        ),
        last_sequences=bodies.ends({"0": 2_999, "1": 0, "2": 0, "3": 0}),
    )
    decision = bodies.decide(observation, now=at(0))
    owned = bodies.assignment(bodies.applied(observation, decision))
    # Still by lag (by count it would be two and two): the outage moves nothing by itself.
    assert owned == {
        "a": {"0": (1, "owned")},
        "b": {"1": (1, "owned"), "2": (1, "owned"), "3": (1, "owned")},
    }


def test_the_store_condition_follows_what_is_known_of_the_store() -> None:
    observation = started(pod("a"))
    unknown = dataclasses.replace(observation, store=observations.StoreRead())
    assert _store_condition(unknown) == ("Unknown", "NotChecked")
    listed = dataclasses.replace(observation, store=observations.StoreRead(listed=True))
    assert _store_condition(listed) == ("True", "CheckpointsListed")
    fault = observations.Fault.of(errors.ConfigurationError("container not found"))
    failing = dataclasses.replace(observation, store=observations.StoreRead(fault=fault))
    assert _store_condition(failing) == ("False", "CheckpointStoreMisconfigured")


def _store_condition(observation: observations.Observation) -> tuple[str, str]:
    after = bodies.applied(observation, bodies.decide(observation, now=at(5)))
    found = bodies.condition(after, "CheckpointStoreReachable")
    return found["status"], found["reason"]


def test_a_pod_whose_configmap_vanished_is_confirmed_by_a_listing_before_any_write() -> None:
    """The pods as read still show b, but its ConfigMap was seen deleted: the garbage
    collector takes a pod's ConfigMap once the pod is gone, and the pod watch may lag. Nothing
    is written until the pods are listed at or after that deletion. Listed since, b stands,
    and its ConfigMap is written again."""
    first, decision = bodies.decide_fully(bodies.observe(pods=[pod("a"), pod("b")]), now=at(0))
    settled = bodies.applied(first, decision)
    gone = configmaps.configmap_name(consumer=bodies.NAME, pod="b")
    without = dataclasses.replace(
        settled, configmaps=tuple(m for m in settled.configmaps if m["metadata"]["name"] != gone)
    )

    def seen(listed: int) -> observations.Observation:
        departures = observations.Departures(listed=listed, vanished={gone: 9})
        return dataclasses.replace(without, departures=departures)

    held = bodies.decide(seen(5), now=at(1))
    assert held.needs_pods
    assert not held.writes.maps
    assert held.epochs is None
    assert not held.status
    _, confirmed = bodies.decide_fully(seen(9), now=at(1))
    assert not confirmed.needs_pods
    assert [w.name for w in confirmed.writes.maps if w.create] == [gone]
    # Another pod's ConfigMap gone is no reason to doubt the pods that still have theirs.
    other = observations.Departures(listed=5, vanished={"ehb-orders-x-0123456789": 9})
    assert not bodies.decide(dataclasses.replace(settled, departures=other), now=at(1)).needs_pods


def test_only_a_listing_after_a_configmap_vanished_confirms_its_pod() -> None:
    d = observations.Departures(listed=5, vanished={"cm-b": 6, "cm-c": None})
    assert not d.confirmed("b", map_name="cm-b")
    assert d.confirmed("a", map_name="cm-a")  # its ConfigMap was not seen going
    assert d.confirmed("c", map_name="cm-c")  # no version to order the listing after
    assert observations.Departures(listed=6, vanished={"cm-b": 6}).confirmed("b", map_name="cm-b")
    assert not observations.Departures(vanished={"cm-b": 6}).confirmed("b", map_name="cm-b")
    assert observations.UNCACHED.confirmed("b", map_name="cm-b")


def test_a_hub_fault_before_anything_is_assigned_says_nothing_is_given_out_yet() -> None:
    # A new consumer whose hub cannot be listed: there is no assignment to keep.
    observation = bodies.observe(pods=[pod("a")], ids=None)
    fault = observations.Fault.of(errors.TransientError("AMQP connection refused"))
    failing = dataclasses.replace(observation, hub=observations.HubRead(ids=None, fault=fault))
    decision = bodies.decide(failing, now=at(0))
    assert decision.partitions == ()
    reachable = bodies.condition(bodies.applied(failing, decision), "EventHubReachable")
    assert reachable["message"] == (
        "AMQP connection refused (no partition is assigned yet: none is given out until the "
        "partition list is read; retrying with backoff)"
    )


def test_the_take_over_from_a_pod_whose_containers_ended_says_so() -> None:
    # Succeeded or Failed: still listed (kubectl get pods shows it), but it holds nothing.
    observation = bodies.applying(started(pod("a"), pod("b")), "a")
    ended = pod("b")
    ended["status"]["phase"] = "Failed"
    observation = bodies.with_pods(observation, ended)
    _, decision = bodies.decide_fully(observation, now=at(5))
    assert [e.message for e in decision.events if e.reason == "PartitionTakenOver"] == [
        "Took over partitions 2-3 of b (its containers ended: the pod Succeeded or Failed) "
        "for a (epoch 2)"
    ]


def test_ready_names_the_first_not_ready_owners_by_when_their_partitions_move() -> None:
    observation = started(pod("a"), pod("b"), pod("c"), pod("d"), pod("e"))
    holders = sorted(name for name, held in bodies.assignment(observation).items() if held)
    assert holders == ["a", "b", "c", "d"]
    observation = bodies.with_pods(
        observation,
        pod("a", ready=False, since=10),
        pod("b", ready=False, since=12),
        pod("c", ready=False, since=11),
        pod("d", ready=False, since=13),
    )
    decision = bodies.decide(observation, now=at(14))
    ready = bodies.condition(bodies.applied(observation, decision), "Ready")
    assert ready["message"] == (
        "4 of 4 partitions have no Ready owner yet: NotReady pods a (1 until "
        "2024-05-01T12:00:30Z), c (1 until 2024-05-01T12:00:31Z), b (1 until "
        "2024-05-01T12:00:32Z) and 1 more hold 4; each pod's partitions move to the Ready pods "
        "when podGraceSeconds (20 s) since it turned NotReady ends"
    )


def test_a_new_handoff_timeout_is_written_to_every_pod_and_moves_nothing() -> None:
    """The pods compare their release with the operator's wait (`consumer.releasebudgets`):
    the timeout reaches each ConfigMap, at a new generation, with the same partitions."""
    steady = bodies.applying(bodies.applying(started(pod("a"), pod("b")), "a"), "b")
    before = bodies.assignment(steady)
    spec = {**bodies.SPEC, "balancing": {"handoffTimeoutSeconds": 60}}
    decision = bodies.decide(respec(steady, spec), now=at(5))
    assert decision.epochs is None  # no epoch given out
    assert sorted(w.pod for w in decision.writes.maps) == ["a", "b"]
    for write in decision.writes.maps:
        assert write.data_only
        assert (write.gains, write.revokes) == (False, False)
        assert write.body["data"]["handoffTimeoutSeconds"] == "60"
    after = bodies.applied(respec(steady, spec), decision)
    assert bodies.assignment(after) == before


def test_the_member_count_drops_when_a_notready_pods_grace_ends() -> None:
    # A pod no node took yet (not starting: it may wait for one indefinitely) counts as a
    # member for podGraceSeconds; the cycle comes back when that ends, not at the interval.
    observation = bodies.applying(started(pod("a"), pod("b")), "a")
    observation = bodies.applying(observation, "b")
    unplaced = pod("c", ready=False, since=10)
    unplaced["status"]["phase"] = "Pending"
    observation = bodies.with_pods(observation, unplaced)
    waiting = bodies.decide(observation, now=at(15))
    assert (waiting.moves, waiting.status["memberCount"]) == ((), 3)
    assert waiting.next_in == 15.0  # podGraceSeconds 20 after it turned NotReady at 10
    after = bodies.decide(bodies.applied(observation, waiting), now=at(30))
    assert after.status["memberCount"] == 2
