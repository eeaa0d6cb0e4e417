"""Dead letters of a revoked owner, on Azurite: a pod whose epoch was superseded in the
checkpoint blob writes no dead letter (the new owner processes that batch itself)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing, deadletters, deliveries
from eventhub_balancer.consumer import metrics, partitions
from eventhub_balancer.contracts import failurepolicy, startpositions
from tests.support import consumerfakes

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
WHERE: dict[str, str] = {
    "fully_qualified_namespace": "shop.servicebus.windows.net",
    "eventhub_name": "orders",
    "consumer_group": "$Default",
}


def store(container: Any, owner: str) -> checkpointing.CheckpointStore:
    return checkpointing.CheckpointStore(container, owner_id=owner, **WHERE)


def batch(first: int, last: int) -> list[deliveries.ReceivedEvent]:
    return [
        deliveries.ReceivedEvent(
            partition="0",
            sequence_number=n,
            offset=str(n),
            enqueued_time=T0,
            partition_key=None,
            properties={},
            body=b"poison",
        )
        for n in range(first, last + 1)
    ]


async def dead_letters_of(container: Any) -> list[str]:
    prefix = "shop.servicebus.windows.net/orders/$default/deadletter/"
    return [b.name async for b in container.list_blobs(name_starts_with=prefix)]


async def test_a_revoked_owner_writes_no_dead_letter(blob_container: Any) -> None:
    await store(blob_container, "pod-a").fence("0", 1)
    await store(blob_container, "pod-b").fence("0", 2)  # the partition moved on
    writer = deadletters.DeadLetterWriter(blob_container, **WHERE)
    with pytest.raises(errors.OwnershipLost, match="epoch 2 by pod-b supersedes our epoch 1"):
        await writer.write(batch(5, 6), error="boom", attempts=3, pod="pod-a", epoch=1)
    assert await dead_letters_of(blob_container) == []


async def test_the_owner_writes_its_dead_letter(blob_container: Any) -> None:
    await store(blob_container, "pod-a").fence("0", 1)
    await store(blob_container, "pod-b").fence("0", 2)
    writer = deadletters.DeadLetterWriter(blob_container, **WHERE)
    name = await writer.write(batch(5, 6), error="boom", attempts=3, pod="pod-b", epoch=2)
    assert await dead_letters_of(blob_container) == [name]


@pytest.mark.parametrize("metadata", [None, {"sequencenumber": "not a number"}])
async def test_a_missing_or_unreadable_checkpoint_does_not_hold_a_dead_letter_back(
    blob_container: Any, metadata: dict[str, str] | None
) -> None:
    """Neither says that another owner holds the partition (the checkpoint write that follows
    the dead letter recreates a deleted blob, or reports an unreadable one)."""
    if metadata is not None:
        checkpoint = "shop.servicebus.windows.net/orders/$default/checkpoint/0"
        await blob_container.upload_blob(checkpoint, b"", metadata=metadata)
    writer = deadletters.DeadLetterWriter(blob_container, **WHERE)
    name = await writer.write(batch(5, 6), error="boom", attempts=3, pod="pod-a", epoch=1)
    assert await dead_letters_of(blob_container) == [name]


async def test_a_worker_whose_partition_moved_on_ends_lost_and_dead_letters_nothing(
    blob_container: Any,
) -> None:
    """The whole path: pod-a's handler keeps failing a batch while pod-b fences epoch 2 in
    the blob (its link not yet open); pod-a gives up on the batch, is refused the dead letter,
    and stops without a checkpoint."""
    hub = consumerfakes.FakeHub()
    hub.append("0", 3)
    old, new = store(blob_container, "pod-a"), store(blob_container, "pod-b")

    class MovedOnWhileFailing(consumerfakes.Recorder):
        async def __call__(self, events: Any, context: Any) -> None:
            if context.attempt == 1:
                await new.fence("0", 2)
            raise RuntimeError("downstream unavailable")

    async def earliest(partition: str) -> Any:
        return startpositions.EARLIEST

    worker = partitions.PartitionWorker(
        partition="0",
        epoch=1,
        consumer="orders",
        pod="pod-a",
        store=old,
        open_receiver=hub.open,
        resolve_start=earliest,
        processor=MovedOnWhileFailing(),
        settings=partitions.BatchSettings(batch_size=10, max_wait=0.05, retry_backoff=0.01),
        stats=metrics.PartitionStats(),
        processing_policy=failurepolicy.Processing(max_attempts=2, on_failure="deadLetter"),
        dead_letters=deadletters.DeadLetterWriter(blob_container, **WHERE),
    )
    async with asyncio.timeout(30):
        outcome = await worker.run()
    assert outcome == "lost"
    assert isinstance(worker.error, errors.OwnershipLost)
    assert await dead_letters_of(blob_container) == []
    stored = await new.read("0")
    assert stored is not None
    assert (stored.owner_id, stored.epoch, stored.sequence_number) == ("pod-b", 2, -1)
