"""Spark mode's triggers inside the runtime, on fake time: each partition checkpoints after
the trigger that held its batch, and a release waits for the trigger in flight (the fakes of
`tests.consumer.test_triggers`: no JVM, no thread)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer.consumer import assignments, partitions, processing, runtime
from tests.consumer.test_triggers import Handler, SteppedExecutor, spark_triggers
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime


@contextlib.asynccontextmanager
async def spark_runtime(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore,
    processor: processing.BatchProcessor,
) -> AsyncIterator[tuple[runtime.Runtime, Any]]:
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders",
            pod="pod-a",
            batch=partitions.BatchSettings(batch_size=10, max_wait=0.05, release_timeout=20),
            shutdown_timeout=2.0,
        ),
        source=source,
        backends=consumerfakes.fake_backends(hub, store.handle("pod-a")),
        processor=processor,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(10):
            await task


async def test_the_runtime_checkpoints_each_partition_after_its_trigger(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    for p in "012":
        fake_hub.append(p, 25)
    handler = Handler()
    spark = spark_triggers(handler)
    async with spark_runtime(fake_hub, fake_store, spark) as (consumer, source):
        source.put(consumerfakes.configmap(1, {p: (1, "owned") for p in "012"}))
        await consumerfakes.eventually(
            lambda: all(
                p in fake_store.blobs and fake_store.blobs[p].sequence_number == 24 for p in "012"
            ),
            what="final checkpoints",
        )
        rows = sorted(r for _, trigger in handler.triggers for r in trigger)
        assert rows == [(p, n) for p in "012" for n in range(25)]
        # Batches of 10 per partition; triggers gather partitions (fewer calls than batches).
        assert len(handler.triggers) < 9
        assert fake_store.history["0"] == [9, 19, 24]
        assert consumer.stats["1"].events == 25


async def test_a_release_waits_for_the_trigger_in_flight(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    fake_hub.append("1", 5)
    handler = Handler()
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(handler, executor=executor)
    async with spark_runtime(fake_hub, fake_store, spark) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: bool(executor.waiting), what="a trigger")
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking"), "1": (1, "owned")}))
        await asyncio.sleep(0.5)
        assert "0" not in source.released
        assert fake_store.blobs["0"].sequence_number == -1
        executor.hold = False
        while executor.waiting:
            executor.step()
        async with asyncio.timeout(5):
            await source.wait_for(generation=2, released={"0": 1})
        # The trigger finished first, and its checkpoint is the release's.
        assert fake_store.blobs["0"].sequence_number == 4
        rows = [r for _, trigger in handler.triggers for r in trigger if r[0] == "0"]
        assert rows == [("0", n) for n in range(5)]
