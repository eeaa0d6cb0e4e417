"""Two EventHubConsumers that overlap: the newcomer says `Conflict` and writes nothing else."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from eventhub_balancer.contracts import timestamps
from eventhub_balancer.reconciling import conflicts, observations, refusals
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def created(observation: observations.Observation, seconds: float) -> observations.Observation:
    body: Any = copy.deepcopy(observation.body)
    body["metadata"]["creationTimestamp"] = timestamps.format_time(at(seconds))
    return dataclasses.replace(observation, body=body)


def other(
    name: str,
    *,
    seconds: float,
    namespace: str = bodies.NS,
    spec: dict[str, Any] | None = None,
    deleting: bool = False,
) -> conflicts.Peer:
    """Another EventHubConsumer as the peers index sums it up."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "creationTimestamp": timestamps.format_time(at(seconds)),
    }
    if deleting:
        meta["deletionTimestamp"] = timestamps.format_time(at(seconds + 1))
    return conflicts.peer({"metadata": meta, "spec": spec or bodies.SPEC})


def elsewhere(**hub: str) -> dict[str, Any]:
    """The same pods' selector in another namespace does not matter; another hub does."""
    spec = copy.deepcopy(bodies.SPEC)
    spec["eventHub"].update(hub)
    spec["selector"] = {"matchLabels": {"app": "elsewhere"}}
    return spec


def test_the_later_of_two_selecting_the_same_pods_writes_nothing_but_its_conflict() -> None:
    observation = created(bodies.observe(pods=[pod("a"), pod("b")]), 10)
    observation = dataclasses.replace(
        observation,
        peers=(
            other(
                "older",
                seconds=0,
                spec=elsewhere(name="payments") | {"selector": {"matchLabels": {"app": "c"}}},
            ),
        ),
        annotate_pods=True,
    )
    observation, decision = bodies.decide_fully(observation, now=at(20))
    assert (decision.epochs, decision.record, decision.writes.count) == (None, None, 0)
    assert decision.writes.pods == ()
    assert decision.writes.maps == ()
    assert [(e.reason, e.type) for e in decision.events] == [("Conflict", "Warning")]
    assert "EventHubConsumer shop/older selects the same pods" in decision.events[0].message
    after = bodies.applied(observation, decision)
    conflict = bodies.condition(after, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", "Conflict")
    assert "shop/older" in conflict["message"]
    assert bodies.condition(after, "Ready")["status"] == "False"
    assert "epochs" not in after.status
    assert "assignment" not in after.status
    # The next cycle says nothing new: no Event, no status write, still nothing else.
    again = bodies.decide(after, now=at(25))
    assert (again.events, again.status, again.writes.count) == ((), {}, 0)


def test_the_earlier_one_works_as_if_alone() -> None:
    observation = created(bodies.observe(pods=[pod("a")]), 0)
    observation = dataclasses.replace(observation, peers=(other("newer", seconds=10),))
    _, decision = bodies.decide_fully(observation, now=at(20))
    assert decision.epochs == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert decision.writes.count > 0


ACCOUNT_SPEC: dict[str, Any] = copy.deepcopy(bodies.SPEC) | {
    "checkpointStore": {
        "containerName": "checkpoints",
        "accountUrl": "https://acct.blob.core.windows.net",
        "credentials": {"workloadIdentity": {}},
    }
}


def squatted(*, bindings: conflicts.Bindings = conflicts.UNBOUND) -> observations.Observation:
    """The victim (shop/orders, created at 10 s) and an older CR in namespace ``audit`` that
    names the same location: an account URL names the same account whatever namespace names
    it (a connection string's Secret is one per namespace: see the next test)."""
    observation = created(bodies.observe(pods=[pod("a")], spec=ACCOUNT_SPEC), 10)
    squatter = ACCOUNT_SPEC | {"selector": {"matchLabels": {"app": "x"}}}
    return dataclasses.replace(
        observation,
        peers=(other("reader", seconds=0, namespace="audit", spec=squatter),),
        bindings=bindings,
    )


def test_a_location_held_in_another_namespace_refuses_only_the_newcomer() -> None:
    observation, decision = bodies.decide_fully(squatted(), now=at(20))
    # shop/orders came after audit/reader: it is the newcomer, and writes nothing.
    assert (decision.epochs, decision.record, decision.writes.count) == (None, None, 0)
    assert [(e.reason, e.type) for e in decision.events] == [("LocationShared", "Warning")]
    after = bodies.applied(observation, decision)
    conflict = bodies.condition(after, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", "LocationShared")
    assert "EventHubConsumer audit/reader in another namespace" in conflict["message"]
    assert "holds it" in conflict["message"]
    assert "--bind-location NS=shop.servicebus.windows.net" in conflict["message"]
    assert "NS=acct.blob.core.windows.net" in conflict["message"]
    assert "locationBindings" in conflict["message"]
    assert "checkpoint container or consumer group" in conflict["message"]
    ready = bodies.condition(after, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "LocationShared")
    # Said once: the next cycle writes nothing.
    again = bodies.decide(after, now=at(25))
    assert (again.events, again.status, again.writes.count) == ((), {}, 0)
    # The holder, in audit, goes on working as if alone.
    reader = dataclasses.replace(
        created(squatted(), 0),
        namespace="audit",
        name="reader",
        peers=(other(bodies.NAME, seconds=10, spec=ACCOUNT_SPEC),),
    )
    _, working = bodies.decide_fully(reader, now=at(20))
    assert working.epochs == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert all(e.reason != "LocationShared" for e in working.events)
    # Once the holder is gone (or moved to another container), the newcomer works.
    gone, decision = bodies.decide_fully(dataclasses.replace(after, peers=()), now=at(30))
    assert decision.epochs == {"0": 1, "1": 1, "2": 1, "3": 1}
    cleared = bodies.condition(bodies.applied(gone, decision), conflicts.CONFLICT)
    assert (cleared["status"], cleared["reason"]) == ("False", "NoConflict")


def test_a_newcomer_in_another_namespace_does_not_stop_the_holder() -> None:
    """The attack: tenant B creates one CR naming A's location. A, which came first, keeps
    balancing (its failover goes on); only B is refused."""
    victim = created(bodies.observe(pods=[pod("a"), pod("b")], spec=ACCOUNT_SPEC), 0)
    victim, decision = bodies.decide_fully(victim, now=at(5))
    victim = bodies.applied(victim, decision)
    squatter = ACCOUNT_SPEC | {"selector": {"matchLabels": {"app": "x"}}}
    victim = dataclasses.replace(
        victim, peers=(other("mirror", seconds=10, namespace="tenant-b", spec=squatter),)
    )
    # Pod b dies: its partitions go to a at once, at new epochs.
    left = dataclasses.replace(
        victim, pods=tuple(p for p in victim.pods if p["metadata"]["name"] == "a")
    )
    left, decision = bodies.decide_fully(left, now=at(20))
    assert decision.epochs is not None
    assert decision.writes.count > 0
    assert all(e.reason not in ("LocationShared", "Conflict") for e in decision.events)
    moved = bodies.assignment(bodies.applied(left, decision))
    assert sorted(moved["a"]) == ["0", "1", "2", "3"]


def test_creation_ties_are_broken_by_uid() -> None:
    me = other("b", seconds=0, namespace="tenant-b", spec=ACCOUNT_SPEC)
    them = other("a", seconds=0, namespace="tenant-a", spec=ACCOUNT_SPEC)
    assert (me.uid, them.uid) == ("uid-b", "uid-a")
    assert conflicts.holder(me, [them]) == them
    assert conflicts.holder(them, [me]) is None


def test_within_a_namespace_creation_ties_are_broken_by_uid_not_name() -> None:
    """docs/failures.md: of two created in the same second, the later is the higher uid."""
    a = dataclasses.replace(other("a", seconds=0), uid="uid-z")
    b = dataclasses.replace(other("b", seconds=0), uid="uid-a")
    found = conflicts.find(a, [b], pod_labels=[{"app": "c"}])
    assert found is not None
    assert [o.name for o in found.others] == ["b"]
    assert conflicts.find(b, [a], pod_labels=[{"app": "c"}]) is None


def test_a_tie_is_not_called_older() -> None:
    """Two consumers applied together (one manifest): the one applied first read that the
    other "is older", and the person deleted the wrong one."""
    a = dataclasses.replace(other("a", seconds=0), uid="uid-z")
    b = dataclasses.replace(other("b", seconds=0), uid="uid-a")
    found = conflicts.find(a, [b], pod_labels=[{"app": "c"}])
    assert found is not None
    assert refusals.conflict_condition(found).message == (
        f"EventHubConsumer {bodies.NS}/b reads the same Event Hub and consumer group into the "
        "same checkpoint location and was created in the same second with a lower uid, so it "
        "goes first: this one writes nothing until the overlap is gone (change its selector or "
        "checkpoint location, or delete one of them)"
    )
    earlier = conflicts.find(a, [other("b", seconds=-5)], pod_labels=[{"app": "c"}])
    assert earlier is not None
    assert (
        " checkpoint location and is older: this one "
        in refusals.conflict_condition(earlier).message
    )


def test_host_spellings_are_one_location_and_one_binding() -> None:
    """A port or upper case passes the CRD, the spec parser and the allow-list; it must not
    dodge a binding or the holder's claim either. A trailing dot in the spec is refused by the
    CRD and the parser alike (DNS labels only), so it names no location at all; in a binding,
    where the administrator spells the host, it is still the same host."""
    dotted = copy.deepcopy(ACCOUNT_SPEC)
    dotted["checkpointStore"]["accountUrl"] = "https://acct.blob.core.windows.net./"
    assert other("dotted", seconds=10, namespace="tenant-b", spec=dotted).location is None
    variant = copy.deepcopy(ACCOUNT_SPEC)
    variant["eventHub"]["fullyQualifiedNamespace"] = "Shop.servicebus.windows.net:5671"
    variant["checkpointStore"]["accountUrl"] = "https://ACCT.blob.core.windows.net:443/"
    variant["selector"] = {"matchLabels": {"app": "x"}}
    holder = other("orders", seconds=0, namespace="tenant-a", spec=ACCOUNT_SPEC)
    newcomer = other("mirror", seconds=10, namespace="tenant-b", spec=variant)
    assert newcomer.location == holder.location
    refused = conflicts.find(newcomer, [holder], pod_labels=())
    assert refused is not None
    assert refused.reason == "LocationShared"
    for host in ("shop.servicebus.windows.net:5671", "acct.blob.core.windows.net."):
        bindings = conflicts.Bindings.of({host: "tenant-a"})
        refused = conflicts.find(newcomer, [], pod_labels=(), bindings=bindings)
        assert refused is not None
        assert refused.reason == "LocationBound"


def test_a_consumer_that_works_when_the_location_becomes_shared_keeps_what_it_handed_out() -> None:
    """Refused while working: its pods keep their partitions and epochs, nothing moves, no
    epoch is given out; a pod that leaves keeps its partitions in the record until the overlap
    ends, and the first cycle after it hands them on at new epochs."""
    working = created(bodies.observe(pods=[pod("a"), pod("b")], spec=ACCOUNT_SPEC), 10)
    working, decision = bodies.decide_fully(working, now=at(20))
    working = bodies.applied(working, decision)
    held = bodies.assignment(working)
    assert sorted(held) == ["a", "b"]
    record = working.status["assignment"]
    # An older consumer whose own status says it works there too (both worked there before
    # the check, or before a binding was lifted): the younger of two at work yields.
    holders = tuple(dataclasses.replace(p, standing=conflicts.WORKING) for p in squatted().peers)
    shared = dataclasses.replace(working, peers=holders)
    shared, decision = bodies.decide_fully(shared, now=at(30))
    assert (decision.epochs, decision.record, decision.writes.count) == (None, None, 0)
    shared = bodies.applied(shared, decision)
    assert bodies.assignment(shared) == held
    assert shared.status["assignment"] == record
    # Pod b leaves while refused: nobody is handed its partitions, nor a new epoch.
    left = dataclasses.replace(
        shared, pods=tuple(p for p in shared.pods if p["metadata"]["name"] == "a")
    )
    left, decision = bodies.decide_fully(left, now=at(40))
    assert (decision.epochs, decision.record, decision.writes.count) == (None, None, 0)
    # The overlap ends: b's partitions go to a at higher epochs, a's own keep theirs.
    freed, decision = bodies.decide_fully(dataclasses.replace(left, peers=()), now=at(50))
    freed = bodies.applied(freed, decision)
    now_held = bodies.assignment(freed)["a"]
    assert sorted(now_held) == ["0", "1", "2", "3"]
    for partition, (epoch, _state) in held["a"].items():
        assert now_held[partition][0] == epoch
    for partition, (epoch, _state) in held["b"].items():
        assert now_held[partition][0] > epoch


def test_a_location_bound_to_this_namespace_ignores_a_squatter() -> None:
    bindings = conflicts.Bindings.of({"acct.blob.core.windows.net": bodies.NS})
    observation, decision = bodies.decide_fully(squatted(bindings=bindings), now=at(20))
    assert decision.epochs == {"0": 1, "1": 1, "2": 1, "3": 1}
    after = bodies.applied(observation, decision)
    assert bodies.condition(after, "Ready")["status"] == "True"
    assert all(c["type"] != conflicts.CONFLICT for c in after.status.get("conditions") or [])


def test_a_consumer_naming_a_host_bound_to_another_namespace_is_refused_whatever_its_age() -> None:
    bindings = conflicts.Bindings.of({"acct.blob.core.windows.net": "audit"})
    observation = dataclasses.replace(squatted(bindings=bindings), peers=())
    observation = created(observation, 0)
    observation, decision = bodies.decide_fully(observation, now=at(20))
    assert (decision.epochs, decision.record, decision.writes.count) == (None, None, 0)
    assert [(e.reason, e.type) for e in decision.events] == [("LocationBound", "Warning")]
    conflict = bodies.condition(bodies.applied(observation, decision), conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", "LocationBound")
    assert "acct.blob.core.windows.net" in conflict["message"]
    assert "audit" not in conflict["message"]  # the owner's namespace is not told
    # The hub's host binds as well.
    hub = conflicts.Bindings.of({"shop.servicebus.windows.net": "audit"})
    refused = conflicts.find(
        conflicts.peer(observation.body, namespace=bodies.NS), (), pod_labels=(), bindings=hub
    )
    assert refused is not None
    assert refused.reason == "LocationBound"


def test_a_same_named_secret_in_another_namespace_is_another_location() -> None:
    observation = created(bodies.observe(pods=[pod("a")]), 10)
    observation = dataclasses.replace(
        observation,
        peers=(
            other(
                "reader",
                seconds=0,
                namespace="audit",
                spec=bodies.SPEC | {"selector": {"matchLabels": {"app": "x"}}},
            ),
        ),
    )
    _, decision = bodies.decide_fully(observation, now=at(20))
    assert decision.writes.count > 0


def test_no_overlap_no_conflict() -> None:
    observation = created(bodies.observe(pods=[pod("a")]), 10)
    observation = dataclasses.replace(
        observation,
        peers=(
            other("group", seconds=0, spec=elsewhere(consumerGroup="audit")),
            other("pods", seconds=0, spec=elsewhere(name="payments")),
            other("leaving", seconds=0, deleting=True),
            other("broken", seconds=0, spec={"selector": {"matchLabels": {"app": "c"}}}),
        ),
    )
    _, decision = bodies.decide_fully(observation, now=at(20))
    assert decision.writes.count > 0
    assert all(e.reason != "Conflict" for e in decision.events)


def test_once_the_overlap_is_gone_the_later_one_works_and_clears_its_condition() -> None:
    observation = created(bodies.observe(pods=[pod("a")]), 10)
    refused = dataclasses.replace(observation, peers=(other("older", seconds=0),))
    refused, decision = bodies.decide_fully(refused, now=at(20))
    after = dataclasses.replace(bodies.applied(refused, decision), peers=())
    after, decision = bodies.decide_fully(after, now=at(25))
    assert decision.epochs == {"0": 1, "1": 1, "2": 1, "3": 1}
    done = bodies.applied(after, decision)
    conflict = bodies.condition(done, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("False", "NoConflict")
    assert bodies.condition(done, "Ready")["status"] == "True"


def test_ties_without_uids_are_broken_by_namespace_and_name() -> None:
    me = conflicts.peer(
        {
            "metadata": {
                "name": "b",
                "namespace": "shop",
                "creationTimestamp": "2024-05-01T12:00:00Z",
            },
            "spec": bodies.SPEC,
        }
    )
    earlier = dataclasses.replace(me, name="a")
    later = dataclasses.replace(me, name="c")
    labels = [{"app": "c"}]
    assert conflicts.find(me, [later], pod_labels=labels) is None
    found = conflicts.find(me, [later, earlier, me], pod_labels=labels)
    assert found is not None
    assert [o.name for o in found.others] == ["a"]
