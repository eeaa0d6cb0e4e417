"""A ConfigMap that someone else's finalizer holds once it is deleted (a backup or policy
controller that puts its finalizer on every ConfigMap): the API server only sets its
deletionTimestamp, and it stays, for as long as that controller takes. Its pod's partitions
move as for any pod gone, and the operator does not take the lingering object for a watch
that lags: it costs no request while it waits to go."""

from __future__ import annotations

import pytest

from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers.cache import rosters
from tests.handlers import test_caching, test_cycles
from tests.support import fakes, watches

NS, NAME, at = test_cycles.NS, test_cycles.NAME, test_cycles.at
Clock, settle = test_caching.Clock, test_caching.settle
FINALIZER = "backup.example.com/protect"


@pytest.fixture
def kube() -> fakes.FakeKube:
    return test_cycles.make_kube()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def replica(kube: fakes.FakeKube, clock: Clock) -> watches.Replica:
    return watches.Replica(kube, fakes.FakeHubs(store=fakes.FakeCheckpointStore()), clock=clock)


def hold(kube: fakes.FakeKube, pod: str) -> str:
    """Someone else's controller puts its finalizer on ``pod``'s ConfigMap; its name."""
    name = configmaps.configmap_name(consumer=NAME, pod=pod)
    cm = kube.objects["configmap", NS, name]
    cm["metadata"]["finalizers"] = [FINALIZER]
    kube._store("configmap", NS, cm)
    return name


async def test_a_held_configmap_of_a_gone_pod_costs_no_request_while_it_waits_to_go(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    t = await settle(replica, kube, clock, start=0)
    held = hold(kube, "b")
    t = await settle(replica, kube, clock, start=t)
    kube.remove_pod(NS, "b")  # the garbage collector deletes its ConfigMap: it stays, held
    t = await settle(replica, kube, clock, start=t)
    assert set(kube.assignment(NS)["a"]) == set(kube.status(NS, NAME)["epochs"])
    assert kube.objects["configmap", NS, held]["metadata"].get("deletionTimestamp")
    kube.apply_generation(NS, "a")  # pod a runs what it took over
    reads, calls = replica.cache.view.reads, len(kube.calls)
    for _ in range(4):  # a quiet minute and more, the finalizer still on
        clock.now += rosters.ECHO_SECONDS * 3
        t += rosters.ECHO_SECONDS * 3
        replica.watch.deliver()
        await replica.cycle(NS, NAME, now=at(t))
    assert replica.cache.view.reads == reads
    assert kube.calls[calls:] == []
    kube.release_finalizers(NS, held)
    replica.watch.deliver()
    await settle(replica, kube, clock, start=t)
    assert ("configmap", NS, held) not in kube.objects
    assert replica.cache.view.reads == reads


async def test_a_pod_back_under_its_name_is_given_its_held_configmap_and_no_tampering(
    replica: watches.Replica, kube: fakes.FakeKube, clock: Clock
) -> None:
    """A StatefulSet's pod re-created under its name while the ConfigMap of the pod before it
    is still held: the name is taken until the finalizer goes, so the operator writes the new
    pod's assignment into that ConfigMap, as it does into one the garbage collector has not
    reached yet. It is the operator's own, not someone's squat."""
    t = await settle(replica, kube, clock, start=0)
    held = hold(kube, "b")
    t = await settle(replica, kube, clock, start=t)
    kube.remove_pod(NS, "b")
    t = await settle(replica, kube, clock, start=t)
    kube.add_pod(NS, "b", labels={"app": "c"}, since=at(t))
    t = await settle(replica, kube, clock, start=t, rounds=12)
    assert [e["message"] for e in kube.events if e["reason"] == "AssignmentTampered"] == []
    cm = kube.objects["configmap", NS, held]
    uid = kube.objects["pod", NS, "b"]["metadata"]["uid"]
    assert cm["metadata"]["annotations"][configmaps.ANNOTATION_POD_UID] == uid
    assert kube.assignment(NS)["b"]
    assert kube.assignment(NS)["a"]
