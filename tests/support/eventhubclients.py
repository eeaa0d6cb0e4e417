"""SDK client helpers for the emulator's tests: receive N events with a bounded wait."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

#: No test waits longer than this for events that should arrive.
RECEIVE_TIMEOUT_S = 30.0


async def send(
    connection_string: str,
    bodies: list[bytes | str],
    *,
    partition_id: str | None = None,
    partition_key: str | None = None,
) -> None:
    """Send ``bodies`` as one batch (the SDK splits nothing: keep them under 1 MB)."""
    async with EventHubProducerClient.from_connection_string(connection_string) as producer:
        batch = await producer.create_batch(partition_id=partition_id, partition_key=partition_key)
        for body in bodies:
            batch.add(EventData(body))
        await producer.send_batch(batch)


async def receive(
    connection_string: str,
    *,
    partition_id: str,
    count: int,
    starting_position: str | int | datetime.datetime = "-1",
    inclusive: bool = False,
    consumer_group: str = "$Default",
    wait_s: float = RECEIVE_TIMEOUT_S,
    **kwargs: Any,
) -> list[EventData]:
    """Receive at least ``count`` events from one partition (aio client, batches)."""
    client = EventHubConsumerClient.from_connection_string(
        connection_string, consumer_group=consumer_group, load_balancing_interval=0.5
    )
    got: list[EventData] = []
    done = asyncio.Event()

    async def on_batch(context: Any, events: list[EventData]) -> None:
        got.extend(events)
        if len(got) >= count:
            done.set()

    task = asyncio.create_task(
        client.receive_batch(
            on_batch,
            partition_id=partition_id,
            starting_position=starting_position,
            starting_position_inclusive=inclusive,
            max_batch_size=1000,
            prefetch=1000,
            **kwargs,
        )
    )
    try:
        await asyncio.wait_for(done.wait(), wait_s)
    finally:
        await client.close()
        await asyncio.wait_for(task, wait_s)
    return got
