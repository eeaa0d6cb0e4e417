"""The CR's ``startPosition`` against the Event Hubs emulator: ``latest`` and ``enqueuedTime``.

A partition without a checkpoint is fenced with a seed taken from the start position (KEDA
reads the lag from it), and the runtime receives from right after the seed. ``latest`` skips
what was enqueued before the partition was taken; ``{enqueuedTime}`` starts at the first event
enqueued at or after the time, and, when there is none yet, behaves as ``latest``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

from eventhub_balancer.adapters import checkpointing
from eventhub_balancer.consumer import assignments, partitions
from tests.support.consumerfakes import Recorder, configmap, eventually
from tests.support.fixtures.consumer import running_pod, send_events

BATCH = partitions.BatchSettings(batch_size=100, max_wait=0.1, retry_backoff=0.05)


@contextlib.asynccontextmanager
async def consuming(
    *, emulator: Any, azurite: Any, container: str, start: object, owned: str
) -> AsyncIterator[tuple[Recorder, assignments.MemorySource]]:
    recorder = Recorder()
    async with running_pod(
        pod="pod-a",
        eventhub_connection_string=emulator.connection_string(),
        blob_connection_string=azurite.connection_string,
        batch=BATCH,
        processor=recorder,
    ) as (_, source):
        source.put(
            configmap(
                1,
                {p: (1, "owned") for p in owned},
                checkpointContainer=container,
                startPosition=json.dumps(start),
            )
        )
        async with asyncio.timeout(30):
            await source.wait_for(generation=1)
        yield recorder, source


async def checkpoints(container: Any) -> dict[str, int]:
    store = checkpointing.CheckpointStore(
        container,
        fully_qualified_namespace="local.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        owner_id="reader",
    )
    return {c.partition: c.sequence_number for c in await store.list()}


async def test_latest_skips_the_backlog_and_takes_what_follows(
    consumer_emulator: Any, azurite: Any, blob_container: Any
) -> None:
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": 100, "1": 50})  # partition 2 stays empty
    async with consuming(
        emulator=consumer_emulator,
        azurite=azurite,
        container=blob_container.container_name,
        start="latest",
        owned="012",
    ) as (recorder, _):
        # Fenced with the last enqueued event as processed (an empty partition: nothing).
        assert await checkpoints(blob_container) == {"0": 99, "1": 49, "2": -1}
        await asyncio.sleep(0.5)  # time enough to (wrongly) deliver the backlog
        assert recorder.done == []
        await send_events(cs, "orders", {"0": 10, "1": 5, "2": 4})
        await eventually(lambda: len(recorder.done) >= 19, within=30, what="the new events")
        await asyncio.sleep(0.3)
    assert sorted(recorder.done) == sorted(
        [("0", n) for n in range(100, 110)]
        + [("1", n) for n in range(50, 55)]
        + [("2", n) for n in range(4)]
    )
    assert await checkpoints(blob_container) == {"0": 109, "1": 54, "2": 3}


async def test_enqueued_time_starts_at_the_first_event_at_or_after_it(
    consumer_emulator: Any, azurite: Any, blob_container: Any
) -> None:
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": 100, "1": 50})
    await asyncio.sleep(0.5)
    when = datetime.datetime.now(datetime.UTC)
    await asyncio.sleep(0.5)
    await send_events(cs, "orders", {"0": 20})  # partition 1 has nothing after `when`
    start = {"enqueuedTime": when.isoformat().replace("+00:00", "Z")}
    async with consuming(
        emulator=consumer_emulator,
        azurite=azurite,
        container=blob_container.container_name,
        start=start,
        owned="01",
    ) as (recorder, _):
        await eventually(lambda: len(recorder.done) >= 20, within=30, what="the later events")
        await asyncio.sleep(0.5)
        assert sorted(recorder.done) == [("0", n) for n in range(100, 120)]
        # Nothing after the time on partition 1: it starts after its last event, as latest.
        await send_events(cs, "orders", {"1": 3})
        await eventually(lambda: len(recorder.done) >= 23, within=30, what="partition 1's news")
    assert sorted(recorder.done) == [("0", n) for n in range(100, 120)] + [
        ("1", n) for n in range(50, 53)
    ]
    assert await checkpoints(blob_container) == {"0": 119, "1": 52}
