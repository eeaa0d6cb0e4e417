"""An EventHubConsumer deleted and created again under the same name finds its pods'
ConfigMaps, which the operator wrote for the one before (a pod owns its ConfigMap, so they
outlive the consumer): it carries on with the same owners, above the epochs the blobs hold,
and reports no tampering, since nobody but the operator wrote them."""

from __future__ import annotations

import copy

import pytest

from eventhub_balancer.contracts import podassignments
from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, SPEC, at, cycle, make_kube
from tests.support import fakes


@pytest.fixture
def kube() -> fakes.FakeKube:
    return make_kube()


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


async def test_a_consumer_created_again_takes_its_pods_configmaps_without_a_tampering_alarm(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.acknowledge(NS, pod)
    for partition in "0123":
        hubs.store.fence(partition, 1)  # the owners' fences, at the epoch they were given
    await cycle(kube, hubs, memory, now=1)
    before = {pod: set(held) for pod, held in kube.assignment(NS).items()}
    kube.add_consumer(NS, NAME, SPEC)  # deleted, and created again: no status at all
    del kube.events[:]
    await cycle(kube, hubs, memories.Memory(), now=10)
    reasons = [e["reason"] for e in kube.events]
    assert "AssignmentTampered" not in reasons, kube.events
    after = kube.assignment(NS)
    assert {pod: set(held) for pod, held in after.items()} == before
    assert all(epoch > 1 for held in after.values() for epoch, _state in held.values())


async def c_took_3_unfenced(kube: fakes.FakeKube, hubs: fakes.FakeHubs) -> None:
    """a: 0, 1 and b: 2, 3 at epoch 1, fenced; c joins and is given 3 at epoch 2, which its
    container, restarting, has not fenced yet (NotReady): the blob of 3 still holds 1."""
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    for partition in "0123":
        hubs.store.fence(partition, 1)
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    await cycle(kube, hubs, memory, now=1)
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=2)
    assert kube.assignment(NS)["c"] == {"3": (2, "owned")}
    kube.set_ready(NS, "c", ready=False, since=at(3))


def holders(kube: fakes.FakeKube, partition: str) -> dict[str, int]:
    return {
        pod: held[partition][0] for pod, held in kube.assignment(NS).items() if partition in held
    }


async def test_a_consumer_created_again_gives_no_epoch_a_pod_holds_unfenced_to_another(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    await c_took_3_unfenced(kube, hubs)
    granted = [  # every (pod, epoch) any ConfigMap ever gave partition 3
        (body["data"].get("pod"), e.epoch)
        for kind, body in kube.history
        if kind == "configmap"
        for p, e in podassignments.parse_data(body.get("data") or {}).partitions.items()
        if p == "3"
    ]
    kube.add_consumer(NS, NAME, SPEC)  # deleted, and applied again from Git: no status
    await cycle(kube, hubs, memories.Memory(), now=4)
    (pod, epoch), *_ = holders(kube, "3").items()
    assert pod != "c"  # c is NotReady: a live pod takes 3 up
    assert epoch > max(e for _p, e in granted), (pod, epoch, granted)
    assert kube.status(NS, NAME)["epochs"]["3"] == epoch


async def test_a_consumer_restored_with_an_old_status_gives_no_epoch_twice() -> None:
    """A backup restored with its status (Velero's restoreStatus) after the EventHubConsumer
    was deleted: a new object, with the status of an earlier time. Since then b released 3
    and c was given it at epoch 2, which c, NotReady, has not fenced: epoch 2 is in c's
    ConfigMap alone. The restarted operator took the old record as its own: 3 back to b at
    epoch 1, status.epochs down to 1, c's ConfigMap reported as tampered with, and once b
    died, 3 went to a at epoch 2, the epoch c holds. A status written for another object is
    now a floor only, as if the consumer had been created again without one."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    for partition in "0123":
        hubs.store.fence(partition, 1)
    backup = copy.deepcopy(kube.status(NS, NAME))
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    await cycle(kube, hubs, memory, now=1)
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=2)
    assert holders(kube, "3") == {"c": 2}
    kube.set_ready(NS, "c", ready=False, since=at(3))
    kube.add_consumer(NS, NAME, SPEC, status=backup)  # restored: a new uid, an old status
    del kube.events[:]
    memory = memories.Memory()  # the operator restarted
    await cycle(kube, hubs, memory, now=10)
    assert "AssignmentTampered" not in [e["reason"] for e in kube.events], kube.events
    assert kube.status(NS, NAME)["epochs"]["3"] >= 2
    kube.remove_pod(NS, "b")
    for seconds in range(11, 40, 3):
        await cycle(kube, hubs, memory, now=seconds)
        kube.apply_generation(NS, "a")
    pods_by_epoch: dict[int, set[str]] = {}
    for kind, body in kube.history:
        if kind != "configmap":
            continue
        parsed = podassignments.parse_data(body.get("data") or {})
        if "3" in parsed.partitions:
            pods_by_epoch.setdefault(parsed.partitions["3"].epoch, set()).add(body["data"]["pod"])
    assert all(len(pods) == 1 for pods in pods_by_epoch.values()), pods_by_epoch
    assert holders(kube, "3")
    assert min(holders(kube, "3").values()) > 2
