"""An EventHubConsumer deleted and created again under the same name finds its pods'
ConfigMaps, which the operator wrote for the one before (a pod owns its ConfigMap, so they
outlive the consumer): it carries on with the same owners, above the epochs the blobs hold,
and reports no tampering, since nobody but the operator wrote them."""

from __future__ import annotations

import pytest

from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, SPEC, cycle, make_kube
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
