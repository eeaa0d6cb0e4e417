"""A dependency's backoff ends when the pods' reports say it answers them again.

In an outage the operator asks the checkpoint store or Event Hubs again after a backoff that
doubles up to five minutes. Before, the dependency answering again was noticed only then:
`CheckpointStoreReachable` stayed False while the pods checkpointed again (65 s after Azurite
was resumed on the local stack, up to five minutes after a long outage), and so did
`EventHubReachable` while they received again.
"""

from __future__ import annotations

from eventhub_balancer import errors
from eventhub_balancer.contracts import partitionreports
from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, at, cycle, make_kube
from tests.handlers.test_pod_acknowledgements import annotate
from tests.support import fakes

CAUSE = "gave up on the checkpoint store, a call's budget of 20 s spent"


def report(*partitions: str) -> str:
    """Pod a's report: ``partitions`` failing at epoch 1."""
    return partitionreports.build(
        {
            p: partitionreports.PartitionReport(
                partition=p, epoch=1, state="failing", attempts=1, error=CAUSE
            )
            for p in partitions
        }
    )


async def outage() -> tuple[fakes.FakeKube, fakes.FakeHubs, memories.Memory]:
    """a: 0, 1 and b: 2, 3; the store fails from the probe at 60 on, a reports 0 and 1
    failing, and the backoff has grown to 80 s (the next attempt at 215)."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    hubs.store.failure = errors.CheckpointStoreUnreachable(CAUSE)
    annotate(kube, "a", partitionreports.ANNOTATION, report("0", "1"))
    for now in (60, 65, 75, 95, 135):
        await cycle(kube, hubs, memory, now=now)
    assert memory.store.backoff.retry_at == at(215).timestamp()
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["status"] == "False"
    return kube, hubs, memory


async def test_a_partition_no_longer_reported_failing_ends_the_backoff() -> None:
    kube, hubs, memory = await outage()
    hubs.store.failure = None
    kube.remove_pod(NS, "b")  # its reports are not of the store: its going says nothing
    reads = len(hubs.store.reads)
    await cycle(kube, hubs, memory, now=140)
    assert len(hubs.store.reads) == reads  # still backing off
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["status"] == "False"
    annotate(kube, "a", partitionreports.ANNOTATION, report("1"))  # 0 checkpointed again
    await cycle(kube, hubs, memory, now=141)
    assert len(hubs.store.reads) == reads + 1
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["status"] == "True"
    assert memory.store.backoff.retry_at == 0.0
    assert memory.store.failing == 0


async def test_a_recovery_the_store_does_not_bear_out_backs_off_again() -> None:
    kube, hubs, memory = await outage()
    annotate(kube, "a", partitionreports.ANNOTATION, report("1"))
    reads = len(hubs.store.reads)
    await cycle(kube, hubs, memory, now=141)  # asked once: it still fails
    assert len(hubs.store.reads) == reads + 1
    assert memory.store.backoff.retry_at == at(141).timestamp() + 160.0
    await cycle(kube, hubs, memory, now=142)  # the same reports: no news, no new attempt
    assert len(hubs.store.reads) == reads + 1


async def test_fewer_partitions_in_trouble_end_the_event_hubs_backoff() -> None:
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    hubs.failure = errors.EventHubUnreachable("connection refused")
    annotate(kube, "a", partitionreports.ANNOTATION, report("0", "1"))
    for now in (5, 10, 20, 40):  # the first writes failingCount 2, which the others read
        await cycle(kube, hubs, memory, now=now)
    assert memory.hub.backoff.retry_at == at(80).timestamp()
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "False"
    hubs.failure = None
    listings = len(hubs.listings)
    annotate(kube, "a", partitionreports.ANNOTATION, report("1"))  # 0 receives again
    await cycle(kube, hubs, memory, now=45)  # read before the status counted 1: not asked
    assert len(hubs.listings) == listings
    await cycle(kube, hubs, memory, now=46)
    assert len(hubs.listings) == listings + 1
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"
