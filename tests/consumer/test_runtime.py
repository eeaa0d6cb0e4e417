"""The partition core and the runtime against in-memory fakes: the at-least-once rules."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from eventhub_balancer.consumer import assignments, partitions, runtime
from tests.support.fixtures.consumer import (
    FakeHub,
    FakeStore,
    Recorder,
    configmap,
    eventually,
    fake_backends,
)

FAST = partitions.BatchSettings(
    batch_size=10, max_wait=0.05, retry_backoff=0.01, retry_backoff_max=0.05, stuck_seconds=0.3
)


@contextlib.asynccontextmanager
async def running(
    hub: FakeHub,
    store: FakeStore,
    recorder: Recorder,
    *,
    pod: str = "pod-a",
    batch: partitions.BatchSettings = FAST,
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders", pod=pod, batch=batch, shutdown_timeout=2.0
        ),
        source=source,
        backends=fake_backends(hub, store.handle(pod)),
        processor=recorder,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(5):
            await task


async def test_processes_every_event_and_checkpoints_after_the_handler(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 35)
    fake_hub.append("1", 7)
    recorder = Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await eventually(lambda: len(recorder.done) == 42, what="all events")
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        await eventually(lambda: fake_store.blobs["0"].sequence_number == 34)
        assert consumer.ready() == (True, "generation 1 applied")
        # Batches of at most 10, in order; a checkpoint after each one.
        assert sorted(recorder.done) == [("0", n) for n in range(35)] + [("1", n) for n in range(7)]
        assert fake_store.history["0"] == [9, 19, 29, 34]
        first = recorder.contexts[0]
        assert (first.consumer, first.pod, first.epoch, first.attempt) == ("orders", "pod-a", 1, 1)
        assert consumer.stats["0"].lag() == 0


async def test_revocation_finishes_the_batch_checkpoints_then_acknowledges(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 25)
    recorder = Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(configmap(1, {"0": (1, "owned")}))
        await eventually(lambda: len(recorder.done) == 25)
        recorder.block = asyncio.Event()
        fake_hub.append("0", 5)
        await eventually(lambda: recorder.calls == 4, what="the in-flight batch")
        source.put(configmap(2, {"0": (1, "revoking")}))
        await asyncio.sleep(0.2)
        # The batch is still in the handler: no release yet, no checkpoint past it.
        assert "0" not in source.released
        assert fake_store.blobs["0"].sequence_number == 24
        recorder.block.set()
        async with asyncio.timeout(5):
            await source.wait_for(generation=2, released={"0": 1})
        assert fake_store.blobs["0"].sequence_number == 29
        assert consumer.owned() == {}

    # The next owner starts right after the final checkpoint: no duplicate.
    successor = Recorder()
    fake_hub.append("0", 3)
    async with running(fake_hub, fake_store, successor, pod="pod-b") as (_, source):
        source.put(configmap(1, {"0": (2, "owned")}))
        await eventually(lambda: len(successor.done) == 3)
    assert successor.done == [("0", 30), ("0", 31), ("0", 32)]


async def test_handler_errors_are_retried_and_never_checkpointed_past(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 10)
    recorder = Recorder()
    recorder.fail_next = 3
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(configmap(1, {"0": (1, "owned")}))
        await eventually(lambda: len(recorder.done) == 10)
        assert recorder.calls == 4
        assert [c.attempt for c in recorder.contexts] == [1, 2, 3, 4]
        assert consumer.stats["0"].handler_errors == 3
        await eventually(lambda: fake_store.blobs["0"].sequence_number == 9)
        assert fake_store.history["0"] == [9]


async def test_a_stuck_partition_turns_the_pod_not_ready_until_it_recovers(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 5)
    recorder = Recorder()
    recorder.fail_next = 10_000
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(configmap(1, {"0": (1, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        await eventually(lambda: not consumer.ready()[0], what="NotReady")
        assert "stuck" in consumer.ready()[1]
        # The metric follows at the next failed attempt (readiness looks at the clock).
        await eventually(lambda: consumer.stats["0"].stuck, what="the stuck metric")
        assert fake_store.history.get("0") is None
        recorder.fail_next = 0
        await eventually(lambda: consumer.ready()[0], what="Ready again")
        assert fake_store.blobs["0"].sequence_number == 4


async def test_ownership_lost_stops_the_partition_without_a_checkpoint(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 10)
    recorder = Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(configmap(1, {"0": (1, "owned")}))
        await eventually(lambda: len(recorder.done) == 10)
        recorder.block = asyncio.Event()
        fake_hub.append("0", 5)
        await eventually(lambda: recorder.calls == 2)
        # A newer owner fences the checkpoint while our batch is in the handler.
        thief = fake_store.handle("pod-b")
        await thief.fence("0", 2, start=None)
        recorder.block.set()
        await eventually(lambda: "0" not in consumer.workers, what="the worker to stop")
        assert fake_store.blobs["0"].epoch == 2
        assert fake_store.blobs["0"].sequence_number == 9
        assert fake_store.history["0"] == [9]
        await asyncio.sleep(0.2)
        assert "0" not in consumer.workers, "restarted a partition it lost at the same epoch"
        assert "0" not in source.released


async def test_a_stolen_link_stops_the_partition_at_once(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 3)
    recorder = Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(configmap(1, {"0": (1, "owned")}))
        await eventually(lambda: len(recorder.done) == 3)
        fake_hub.owner_levels["0"] = 2
        fake_hub.append("0", 3)
        await eventually(lambda: "0" not in consumer.workers)
        assert len(recorder.done) == 3
        assert fake_store.blobs["0"].sequence_number == 2


async def test_shutdown_releases_every_partition_with_a_final_checkpoint(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 12)
    fake_hub.append("1", 12)
    recorder = Recorder()
    batch = partitions.BatchSettings(batch_size=5, max_wait=0.05, checkpoint_interval=3600)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        source.put(configmap(1, {"0": (3, "owned"), "1": (4, "owned")}))
        await eventually(lambda: len(recorder.done) == 24)
        # With a long checkpoint interval nothing was checkpointed so far.
        assert fake_store.blobs["0"].sequence_number == -1
    assert source.released == {"0": 3, "1": 4}
    assert fake_store.blobs["0"].sequence_number == 11
    assert fake_store.blobs["1"].sequence_number == 11
    assert consumer.stopped


async def test_a_handler_that_never_returns_is_abandoned_on_release(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 4)
    recorder = Recorder()
    recorder.block = asyncio.Event()  # never set
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, release_timeout=0.2)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (_, source):
        source.put(configmap(1, {"0": (1, "owned")}))
        await eventually(lambda: recorder.calls == 1)
        source.put(configmap(2, {"0": (1, "revoking")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=2, released={"0": 1})
    # Nothing finished, so the checkpoint stays where it was: the next owner redoes the batch.
    assert fake_store.blobs["0"].sequence_number == -1
    assert recorder.done == []


async def test_the_next_handler_waits_for_the_previous_checkpoint(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    """The crash bound: with a checkpoint write in flight, the next batch is received but not
    handed to the handler, so a SIGKILL can repeat at most one batch."""
    fake_hub.append("0", 30)
    recorder = Recorder()
    store = fake_store.handle("pod-a")
    store.gate = asyncio.Event()
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a", batch=FAST),
        source=source,
        backends=fake_backends(fake_hub, store),
        processor=recorder,
    )
    task = asyncio.create_task(consumer.run())
    try:
        source.put(configmap(1, {"0": (1, "owned")}))
        await eventually(lambda: store.updates_begun == 1, what="the first checkpoint write")
        receiver = fake_hub.receivers[0]
        await eventually(lambda: receiver.next > 10, what="the next batch received")
        await asyncio.sleep(0.2)  # time enough for a second handler call, were it allowed
        assert recorder.calls == 1
        assert recorder.done == [("0", n) for n in range(10)]
        store.gate.set()
        await eventually(lambda: len(recorder.done) == 30, what="the rest")
        await eventually(lambda: fake_store.blobs["0"].sequence_number == 29)
        assert fake_store.history["0"] == [9, 19, 29]
    finally:
        store.gate.set()
        consumer.request_shutdown()
        async with asyncio.timeout(5):
            await task


async def test_an_idle_partition_stops_when_its_last_checkpoint_write_finds_a_new_owner(
    fake_hub: FakeHub, fake_store: FakeStore
) -> None:
    fake_hub.append("0", 5)
    recorder = Recorder()
    store = fake_store.handle("pod-a")
    store.gate = asyncio.Event()
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a", batch=FAST),
        source=source,
        backends=fake_backends(fake_hub, store),
        processor=recorder,
    )
    task = asyncio.create_task(consumer.run())
    try:
        source.put(configmap(1, {"0": (1, "owned")}))
        await eventually(lambda: store.updates_begun == 1, what="the checkpoint write")
        # A newer owner fences while our write is on the wire; no event follows.
        await fake_store.handle("pod-b").fence("0", 2, start=None)
        store.gate.set()
        await eventually(lambda: "0" not in consumer.workers, what="the worker to stop")
        assert fake_store.blobs["0"].epoch == 2
        assert fake_store.blobs["0"].sequence_number == -1
        assert "0" not in source.released
    finally:
        store.gate.set()
        consumer.request_shutdown()
        async with asyncio.timeout(5):
            await task
