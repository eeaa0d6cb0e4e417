"""The operator never reshuffles because a store is slow or failing.

A cycle reads Event Hubs (the partition ids) and the checkpoint blobs (their epochs are a
floor for new ones). When either answers slowly, fails, or both, the cycle must keep the
assignment as it is: no partition moves, no epoch goes up, no ConfigMap is rewritten. Run on
fake time against the in-memory ports of ``tests/support/fakes.py``, with a checkpoint store
that takes seconds to answer (or to give up, as the real adapter's bounded budget does).
"""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import storeaddresses
from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NS, cycle, make_kube
from tests.support import fakes

pytestmark = pytest.mark.looptime

#: The real adapter gives up on the checkpoint store after its budget (about 5 s).
STORE_GIVES_UP_AFTER_S = 5.0


class SlowStoreHubs(fakes.FakeHubs):
    """Event Hubs and a checkpoint store whose listing takes ``delay`` seconds to answer."""

    def __init__(self) -> None:
        super().__init__(store=fakes.FakeCheckpointStore())
        self.delay = 0.0

    async def checkpoints(self, address: storeaddresses.StoreAddress) -> dict[str, tuple[int, int]]:
        await asyncio.sleep(self.delay)
        return await super().checkpoints(address)


def epochs(kube: fakes.FakeKube) -> dict[str, tuple[str, int, str]]:
    """{partition: (pod, epoch, state)} as the ConfigMaps say."""
    return {
        partition: (pod, epoch, state)
        for pod, partitions in kube.assignment(NS).items()
        for partition, (epoch, state) in partitions.items()
    }


async def balanced() -> tuple[fakes.FakeKube, SlowStoreHubs, memories.Memory]:
    kube, hubs, memory = make_kube(), SlowStoreHubs(), memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    await cycle(kube, hubs, memory, now=5)
    assert sorted(epochs(kube)) == ["0", "1", "2", "3"]
    return kube, hubs, memory


@pytest.mark.parametrize("store", ["slow", "failing", "slow and failing"])
@pytest.mark.parametrize("eventhubs", ["reachable", "failing"])
async def test_a_slow_or_failing_store_moves_nothing(store: str, eventhubs: str) -> None:
    kube, hubs, memory = await balanced()
    before = epochs(kube)
    writes = dict(kube.writes)
    hubs.delay = STORE_GIVES_UP_AFTER_S if "slow" in store else 0.0
    if "failing" in store:
        hubs.store.failure = errors.CheckpointStoreUnreachable("gave up after 2 attempt(s)")
    if eventhubs == "failing":
        hubs.failure = errors.EventHubUnreachable("AMQP link detached")

    for now in range(10, 10 * 60, 5):  # ten minutes of cycles, one every interval
        result = await cycle(kube, hubs, memory, now=now)
        assert result.decision.moves == (), now

    assert epochs(kube) == before
    configmap_writes = {k: n for k, n in kube.writes.items() if "configmap" in str(k)}
    assert configmap_writes == {k: n for k, n in writes.items() if "configmap" in str(k)}


async def test_a_pod_leaving_during_a_store_outage_moves_only_its_partitions() -> None:
    kube, hubs, memory = await balanced()
    before = epochs(kube)
    hubs.delay = STORE_GIVES_UP_AFTER_S
    hubs.store.failure = errors.CheckpointStoreUnreachable("gave up after 2 attempt(s)")
    hubs.failure = errors.EventHubUnreachable("AMQP link detached")
    kube.remove_pod(NS, "a")

    for now in range(10, 120, 5):
        await cycle(kube, hubs, memory, now=now)

    after = epochs(kube)
    kept = {p: v for p, v in before.items() if v[0] == "b"}
    assert {p: after[p] for p in kept} == kept  # b's partitions: same pod, same epoch
    for partition, (pod, epoch, _) in after.items():
        if partition not in kept:
            assert pod == "b"
            assert epoch > before[partition][1]


async def test_a_restarted_operator_keeps_the_assignment_through_a_store_outage() -> None:
    kube, hubs, _ = await balanced()
    before = epochs(kube)
    hubs.delay = STORE_GIVES_UP_AFTER_S
    hubs.store.failure = errors.CheckpointStoreUnreachable("gave up after 2 attempt(s)")
    hubs.failure = errors.EventHubUnreachable("AMQP link detached")

    memory = memories.Memory()  # a new operator process: nothing cached
    for now in range(10, 120, 5):
        result = await cycle(kube, hubs, memory, now=now)
        assert result.decision.moves == (), now

    assert epochs(kube) == before
