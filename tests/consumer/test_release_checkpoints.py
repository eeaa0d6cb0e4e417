"""The final checkpoint of a release: written when it is new, else the stored one kept.

A release with nothing new to write asks the store to keep the last checkpoint (one read,
and a write only when the blob is gone: ``wire/test_deleted_checkpoints.py`` deletes it on
Azurite); a release that writes its final checkpoint asks nothing more. Fake loop time.
"""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer.consumer import assignments, metrics, partitions, runtime
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime


class Keeping(consumerfakes.FakeStoreHandle):
    """A store handle that counts the calls to `keep`."""

    def __init__(self, store: consumerfakes.FakeStore, owner: str) -> None:
        super().__init__(store, owner)
        self.keeps = 0

    async def keep(self, partition: str) -> consumerfakes.FakeCheckpoint | None:
        self.keeps += 1
        return await super().keep(partition)


async def released_after_three_events(interval: float) -> tuple[Keeping, list[int]]:
    hub = consumerfakes.FakeHub()
    store = consumerfakes.FakeStore()
    handle = Keeping(store, "pod-a")
    recorder = consumerfakes.Recorder()
    worker = partitions.PartitionWorker(
        partition="0",
        epoch=1,
        consumer="orders",
        pod="pod-a",
        store=handle,
        open_receiver=hub.open,
        resolve_start=consumerfakes.resolve_nothing,
        processor=recorder,
        settings=partitions.BatchSettings(
            batch_size=10, max_wait=0.05, checkpoint_interval=interval
        ),
        stats=metrics.PartitionStats(),
    )
    task = asyncio.create_task(worker.run())
    hub.append("0", 3)
    await consumerfakes.eventually(lambda: len(recorder.done) == 3)
    await asyncio.sleep(1)  # an interval of 0 has written the batch's checkpoint by now
    worker.release()
    assert await task == "released"
    return handle, store.history["0"]


async def test_a_release_that_writes_its_final_checkpoint_reads_nothing_more() -> None:
    handle, written = await released_after_three_events(interval=3600)
    assert (written, handle.keeps) == ([2], 0)


async def test_a_release_with_nothing_new_keeps_the_stored_checkpoint() -> None:
    handle, written = await released_after_three_events(interval=0)
    assert (written, handle.keeps) == ([2], 1)


async def test_a_final_checkpoint_that_fails_is_acknowledged_and_repeated_by_the_next_owner() -> (
    None
):
    """docs/consumer.md: a store unreachable for the whole budget ends the worker; its release
    is acknowledged at once (waiting for the hand-off timeout would repeat the same events)."""
    hub = consumerfakes.FakeHub()
    store = consumerfakes.FakeStore()
    handle = store.handle("pod-a")
    recorder = consumerfakes.Recorder()
    settings = partitions.BatchSettings(batch_size=10, max_wait=0.05, checkpoint_interval=3600)
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a", batch=settings),
        source=source,
        backends=consumerfakes.fake_backends(hub, handle),
        processor=recorder,
    )
    task = asyncio.create_task(consumer.run())
    source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
    hub.append("0", 3)
    await consumerfakes.eventually(lambda: len(recorder.done) == 3)
    handle.fail_updates = 1
    source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
    async with asyncio.timeout(5):
        await source.wait_for(released={"0": 1})
    assert store.blobs["0"].sequence_number == -1  # the final checkpoint was not written
    consumer.request_shutdown()
    await task
