"""``startPosition: {enqueuedTime: T}`` at a partition's first take-up (`connections`'s start
resolution), on fake loop time (looptime) against the SDK fakes of ``tests.support.sdkclients``.

The partition holds events 0..199, event ``n`` enqueued at ``T0 + n`` s, and no checkpoint;
``T = T0 + 100 s``, so the seed must name event 99 as the last processed. A receive link that
is slow to open once made the start "every event is older" and seeded event 199: events
100..199 were never processed. Now only Event Hubs' own answer (the partition's last event is
older than T, or it is empty) seeds the end; a link that does not deliver fails the worker,
which writes nothing and starts again after its backoff.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing, receiving, retrying
from eventhub_balancer.consumer import connections, metrics, partitions
from eventhub_balancer.contracts import checkpointblobs, startpositions
from tests.support import consumerfakes, sdkclients

pytestmark = pytest.mark.looptime

ADDRESS = receiving.EventHubAddress("local.servicebus.windows.net", "orders")
EVENTS = 200
FROM_100 = startpositions.FromEnqueuedTime(enqueued_time=sdkclients.enqueued_time(100))


def hub_with(monkeypatch: pytest.MonkeyPatch, partition: sdkclients.FakePartition) -> None:
    hub = sdkclients.FakeEventHub({"0": partition})
    monkeypatch.setattr(receiving, "make_client", hub.client)


def checkpoints() -> checkpointing.CheckpointStore:
    return checkpointing.CheckpointStore(
        sdkclients.NoCheckpoints(),
        fully_qualified_namespace=ADDRESS.fully_qualified_namespace,
        eventhub_name=ADDRESS.eventhub_name,
        consumer_group="$Default",
        owner_id="pod-a",
        retry=retrying.RetryPolicy(seed=1),
    )


async def resolve(start: startpositions.StartPosition) -> Any:
    return await connections._resolve_start(checkpoints(), ADDRESS, "0", start)


@pytest.mark.parametrize("open_delay", [6.0, 29.0])
async def test_a_slow_link_seeds_the_event_before_the_time(
    monkeypatch: pytest.MonkeyPatch, open_delay: float
) -> None:
    hub_with(monkeypatch, sdkclients.FakePartition(EVENTS, open_delay=open_delay))
    seed = await resolve(FROM_100)
    # The fence creates the checkpoint at the seed; the consumer resumes right after it.
    assert seed.sequence_number == 99, f"events 100..{seed.sequence_number} never processed"


async def test_a_link_that_does_not_deliver_fails_the_start_and_seeds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    partition = sdkclients.FakePartition(EVENTS, open_delay=3600)
    hub_with(monkeypatch, partition)
    with pytest.raises(errors.EventHubUnreachable):
        await resolve(FROM_100)
    partition.open_delay = 0.5  # the link mends: the worker's next start finds event 100
    seed = await resolve(FROM_100)
    assert seed.sequence_number == 99


async def test_an_old_owners_exclusive_link_fails_the_start_and_seeds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub_with(monkeypatch, sdkclients.FakePartition(EVENTS, held_by_owner=True))
    with pytest.raises(errors.EventHubUnreachable):
        await resolve(FROM_100)


async def test_a_time_after_every_event_seeds_the_end_from_one_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    partition = sdkclients.FakePartition(EVENTS, open_delay=3600)
    hub_with(monkeypatch, partition)
    later = startpositions.FromEnqueuedTime(enqueued_time=sdkclients.enqueued_time(EVENTS + 60))
    seed = await resolve(later)
    assert seed == checkpointblobs.Position(offset="1990", sequence_number=EVENTS - 1)
    # Seeded from the answer that decided it: an event enqueued after it is not skipped.
    assert len(partition.properties_reads) == 1
    assert partition.opens == []


async def test_the_worker_fails_without_a_checkpoint_when_the_link_does_not_deliver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runtime starts a failed worker again after its backoff (`restarts`); a seed
    written now would stand for good (the fence keeps an existing checkpoint)."""
    hub_with(monkeypatch, sdkclients.FakePartition(EVENTS, open_delay=3600))
    store = consumerfakes.FakeStore().handle("pod-a")

    async def resolve_start(partition: str) -> Any:
        return await connections._resolve_start(checkpoints(), ADDRESS, partition, FROM_100)

    worker = partitions.PartitionWorker(
        partition="0",
        epoch=1,
        consumer="orders",
        pod="pod-a",
        store=store,
        open_receiver=consumerfakes.FakeHub().open,
        resolve_start=resolve_start,
        processor=consumerfakes.Recorder(),
        settings=partitions.BatchSettings(batch_size=10, max_wait=0.05),
        stats=metrics.PartitionStats(),
    )
    async with asyncio.timeout(120):
        outcome = await worker.run()
    assert outcome == "failed"
    assert isinstance(worker.error, errors.EventHubUnreachable)
    assert store.fence_times == []
