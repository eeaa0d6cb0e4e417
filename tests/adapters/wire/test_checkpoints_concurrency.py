"""Owners racing on Azurite: fencing holds, and no sequence number ever goes backwards."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing as cp
from eventhub_balancer.adapters import retrying


def store(container: Any, owner: str) -> cp.CheckpointStore:
    return cp.CheckpointStore(
        container,
        fully_qualified_namespace="race.servicebus.windows.net",
        eventhub_name="hub",
        consumer_group="$default",
        owner_id=owner,
        retry=retrying.RetryPolicy(seed=1),
    )


class Watcher:
    """Reads the blob in a loop and records every (epoch, sequence number) it saw."""

    def __init__(self, reader: cp.CheckpointStore, partition: str) -> None:
        self.reader, self.partition = reader, partition
        self.seen: list[tuple[int, int]] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        while not self.stop.is_set():
            stored = await self.reader.read(self.partition)
            if stored is not None:
                self.seen.append((stored.epoch, stored.sequence_number))
            await asyncio.sleep(0.005)


async def test_epoch_3_and_4_race_through_1000_updates(blob_container: Any) -> None:
    old, new = store(blob_container, "pod-old"), store(blob_container, "pod-new")
    watcher = Watcher(store(blob_container, "watcher"), "0")
    await old.fence("0", 3)
    fenced_at: list[float] = []
    hundred_done = asyncio.Event()
    old_successes: list[tuple[float, int]] = []  # (start time, sequence number)
    old_rejections_after_fence = 0

    async def old_owner() -> None:
        nonlocal old_rejections_after_fence
        for n in range(1, 501):
            started = time.monotonic()
            try:
                await old.update("0", offset=str(n), sequence_number=n)
                old_successes.append((started, n))
                if len(old_successes) == 100:
                    hundred_done.set()
            except (errors.OwnershipLost, errors.InvalidInput):
                # Lost (or not fenced after the loss): try to take it back with epoch 3.
                if fenced_at and started > fenced_at[0]:
                    old_rejections_after_fence += 1
                with pytest.raises(errors.OwnershipLost):
                    await old.fence("0", 3)

    async def new_owner() -> None:
        await hundred_done.wait()
        taken = await new.fence("0", 4)
        fenced_at.append(time.monotonic())
        for n in range(taken.sequence_number + 1, taken.sequence_number + 501):
            await new.update("0", offset=str(n), sequence_number=n)

    watching = asyncio.create_task(watcher.run())
    async with asyncio.timeout(60):
        await asyncio.gather(old_owner(), new_owner())
    watcher.stop.set()
    await watching

    # No write of epoch 3 that started after epoch 4 fenced ever succeeded ...
    assert fenced_at
    assert all(started < fenced_at[0] for started, _ in old_successes)
    assert old_rejections_after_fence > 0
    # ... what the blob showed never went backwards, and it ends at epoch 4's last write.
    assert len(watcher.seen) > 10
    assert watcher.seen == sorted(watcher.seen)
    final = await new.read("0")
    assert final is not None
    assert final.epoch == 4
    last_old = max(n for _, n in old_successes)
    assert final.sequence_number >= last_old + 500


async def test_32_partitions_checkpointed_concurrently(blob_container: Any) -> None:
    owner = store(blob_container, "pod-a")
    partitions = [str(p) for p in range(32)]

    async def drive(partition: str) -> None:
        await owner.fence(partition, 1)
        for n in range(20):
            await owner.update(partition, offset=f"{partition}-{n}", sequence_number=n)

    async with asyncio.timeout(60):
        await asyncio.gather(*(drive(p) for p in partitions))
    listed = await owner.list()
    assert [c.partition for c in listed] == partitions
    assert {(c.sequence_number, c.offset, c.epoch) for c in listed} == {
        (19, f"{p}-19", 1) for p in partitions
    }
