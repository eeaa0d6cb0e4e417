"""100,000 events through the emulator: none lost, none reordered, positions consistent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer
from azure.eventhub.aio import EventHubProducerClient as AioProducer

from tests.support.fixtures.eventhubs import EventHubTarget

EVENTS = 100_000
PARTITIONS = 4
TIMEOUT_S = 240.0


@pytest.fixture
def eventhubs_hub_partitions() -> int:
    return PARTITIONS


async def _send_all(connection_string: str) -> None:
    async with AioProducer.from_connection_string(connection_string) as producer:
        sent = 0
        while sent < EVENTS:
            # round robin over partitions per batch; the body says the event's global number
            batch = await producer.create_batch(max_size_in_bytes=256 * 1024)
            while sent < EVENTS:
                try:
                    batch.add(EventData(f"{sent:08d}"))
                except ValueError:
                    break
                sent += 1
            await producer.send_batch(batch)


async def _receive_partition(connection_string: str, partition: str, count: int) -> list[Any]:
    client = AioConsumer.from_connection_string(
        connection_string, consumer_group="$Default", load_balancing_interval=0.5
    )
    got: list[Any] = []
    done = asyncio.Event()

    async def on_batch(context: Any, events: list[Any]) -> None:
        got.extend((e.sequence_number, e.offset, e.body_as_str()) for e in events)
        if len(got) >= count:
            done.set()

    task = asyncio.create_task(
        client.receive_batch(
            on_batch,
            partition_id=partition,
            starting_position="-1",
            max_batch_size=3000,
            prefetch=3000,
        )
    )
    try:
        await asyncio.wait_for(done.wait(), TIMEOUT_S)
    finally:
        await client.close()
        await asyncio.wait_for(task, 30)
    return got


async def test_100k_events_none_lost_none_reordered(eventhubs_hub: EventHubTarget) -> None:
    await _send_all(eventhubs_hub.connection_string)
    infos = {
        p: eventhubs_hub.emulator.partition_info(eventhubs_hub.name, p)
        for p in map(str, range(PARTITIONS))
    }
    counts = {p: info.last_enqueued_sequence_number + 1 for p, info in infos.items()}
    assert sum(counts.values()) == EVENTS
    received = await asyncio.gather(
        *(
            _receive_partition(eventhubs_hub.connection_string, p, counts[p])
            for p in map(str, range(PARTITIONS))
        )
    )
    bodies: list[str] = []
    for partition, events in zip(map(str, range(PARTITIONS)), received, strict=True):
        assert len(events) == counts[partition]
        assert [seq for seq, _, _ in events] == list(range(counts[partition]))
        offsets = [int(offset) for _, offset, _ in events]
        assert offsets == sorted(offsets)
        assert len(set(offsets)) == len(offsets)
        assert str(offsets[-1]) == str(infos[partition].last_enqueued_offset)
        numbers = [int(body) for _, _, body in events]
        assert numbers == sorted(numbers), f"partition {partition} reordered events"
        bodies.extend(body for _, _, body in events)
    assert sorted(map(int, bodies)) == list(range(EVENTS))
