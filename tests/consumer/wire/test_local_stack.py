"""The runtime on the local stack: the Event Hubs emulator (real SDK) and Azurite (real store).

Two runtimes in one process hand partitions over the way the operator orders it (revoke,
final checkpoint, release acknowledgement, assign with a higher epoch): every event is
processed, none twice, and the checkpoint blobs end at the last event. A receiver with a
higher epoch that takes a partition without a hand-off stops the old owner at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from eventhub_balancer.adapters import checkpointing
from eventhub_balancer.consumer import assignments, partitions, runtime
from tests.support.consumerfakes import Recorder, configmap, eventually
from tests.support.fixtures.consumer import running_pod, send_events

BATCH = partitions.BatchSettings(batch_size=200, max_wait=0.2, retry_backoff=0.05)


@contextlib.asynccontextmanager
async def consumer_pod(
    pod: str, *, emulator: Any, azurite: Any, recorder: Recorder
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    async with running_pod(
        pod=pod,
        eventhub_connection_string=emulator.connection_string(),
        blob_connection_string=azurite.connection_string,
        batch=BATCH,
        processor=recorder,
    ) as (consumer, source):
        yield consumer, source


def assignment(
    generation: int, container: str, parts: dict[str, tuple[int, str]]
) -> dict[str, Any]:
    return configmap(generation, parts, checkpointContainer=container)


async def test_planned_hand_off_has_no_duplicates(
    consumer_emulator: Any, azurite: Any, blob_container: Any
) -> None:
    container = blob_container.container_name
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": 1500, "1": 1500, "2": 1500, "3": 1500})
    first, second = Recorder(), Recorder()
    async with consumer_pod(
        "pod-a", emulator=consumer_emulator, azurite=azurite, recorder=first
    ) as (_, a_source):
        a_source.put(assignment(1, container, {p: (1, "owned") for p in "0123"}))
        async with asyncio.timeout(30):
            await a_source.wait_for(generation=1)
        await eventually(lambda: len(first.done) >= 2000, within=60, what="progress on pod-a")
        # Move 2 and 3 while events are still flowing in.
        sending = asyncio.create_task(send_events(cs, "orders", {"2": 500, "3": 500}))
        a_source.put(
            assignment(
                2,
                container,
                {"0": (1, "owned"), "1": (1, "owned"), "2": (1, "revoking"), "3": (1, "revoking")},
            )
        )
        async with asyncio.timeout(30):
            await a_source.wait_for(generation=2, released={"2": 1, "3": 1})
        async with consumer_pod(
            "pod-b", emulator=consumer_emulator, azurite=azurite, recorder=second
        ) as (_, b_source):
            b_source.put(assignment(1, container, {"2": (2, "owned"), "3": (2, "owned")}))
            await sending
            await eventually(
                lambda: len(first.done) + len(second.done) >= 7000, within=90, what="all events"
            )
    seen = collections.Counter(first.done + second.done)
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert duplicates == {}
    for partition, count in {"0": 1500, "1": 1500, "2": 2000, "3": 2000}.items():
        assert {n for (p, n) in seen if p == partition} == set(range(count))
    assert all(p in "01" for p, _ in second.done) is False  # pod-b did take over 2 and 3
    store = checkpointing.CheckpointStore(
        blob_container,
        fully_qualified_namespace="local.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        owner_id="reader",
    )
    final = {c.partition: (c.sequence_number, c.epoch, c.owner_id) for c in await store.list()}
    assert final == {
        "0": (1499, 1, "pod-a"),
        "1": (1499, 1, "pod-a"),
        "2": (1999, 2, "pod-b"),
        "3": (1999, 2, "pod-b"),
    }


async def test_a_higher_epoch_stops_the_old_owner_at_once(
    consumer_emulator: Any, azurite: Any, blob_container: Any
) -> None:
    container = blob_container.container_name
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": 300})
    old, new = Recorder(), Recorder()
    async with consumer_pod("pod-a", emulator=consumer_emulator, azurite=azurite, recorder=old) as (
        a,
        a_source,
    ):
        a_source.put(assignment(1, container, {"0": (1, "owned")}))
        await eventually(lambda: len(old.done) == 300, within=30)
        # No hand-off: another pod takes the partition with epoch 2 (a failover).
        async with consumer_pod(
            "pod-b", emulator=consumer_emulator, azurite=azurite, recorder=new
        ) as (_, b_source):
            b_source.put(assignment(1, container, {"0": (2, "owned")}))
            async with asyncio.timeout(30):
                await b_source.wait_for(generation=1)
            await eventually(lambda: "0" not in a.workers, within=15, what="the old owner to stop")
            await send_events(cs, "orders", {"0": 100})
            await eventually(lambda: len(new.done) == 100, within=30)
            assert len(old.done) == 300
            assert "0" not in a_source.released  # lost, not released: no acknowledgement
