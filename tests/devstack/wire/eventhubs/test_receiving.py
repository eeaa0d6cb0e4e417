"""Receives from every kind of starting position, runtime metrics, consumer groups."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer

from eventhub_balancer_devstack.eventhubs import EventHubsEmulator, hubs
from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget


def _time(position: hubs.EventPosition) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(position.enqueued_ms / 1000, tz=datetime.UTC)


@dataclasses.dataclass(frozen=True)
class TenEvents:
    """A hub whose partition 0 holds e0..e9, sent as two batches a moment apart."""

    target: EventHubTarget
    positions: list[hubs.EventPosition]

    @property
    def connection_string(self) -> str:
        return self.target.connection_string


@pytest.fixture(scope="module")
def ten(eventhubs_emulator: EventHubsEmulator) -> TenEvents:
    name = "receiving-ten-events"
    eventhubs_emulator.create_hub(name, 2)
    target = EventHubTarget(emulator=eventhubs_emulator, name=name, partitions=2)
    with EventHubProducerClient.from_connection_string(target.connection_string) as producer:
        producer.send_batch([EventData(f"e{i}") for i in range(5)], partition_id="0")
        time.sleep(0.02)  # a later enqueued time for the second batch
        producer.send_batch([EventData(f"e{i}") for i in range(5, 10)], partition_id="0")
    positions = eventhubs_emulator.event_positions(name, "0")
    assert positions[0].enqueued_ms < positions[5].enqueued_ms
    return TenEvents(target=target, positions=positions)


async def test_earliest_gives_everything_in_order(ten: TenEvents) -> None:
    got = await clients.receive(ten.connection_string, partition_id="0", count=10)
    assert [e.body_as_str() for e in got] == [f"e{i}" for i in range(10)]
    assert [e.sequence_number for e in got] == list(range(10))
    assert [int(e.offset) for e in got] == [p.offset for p in ten.positions]
    assert [e.enqueued_time for e in got] == [_time(p) for p in ten.positions]
    assert len({e.offset for e in got}) == 10


@pytest.mark.parametrize(
    ("inclusive", "first"), [(False, 5), (True, 4)], ids=["exclusive", "inclusive"]
)
async def test_from_sequence_number(ten: TenEvents, inclusive: bool, first: int) -> None:
    got = await clients.receive(
        ten.connection_string,
        partition_id="0",
        count=10 - first,
        starting_position=4,
        inclusive=inclusive,
    )
    assert [e.sequence_number for e in got] == list(range(first, 10))


@pytest.mark.parametrize(
    ("inclusive", "first"), [(False, 7), (True, 6)], ids=["exclusive", "inclusive"]
)
async def test_from_offset(ten: TenEvents, inclusive: bool, first: int) -> None:
    offset = str(ten.positions[6].offset)
    got = await clients.receive(
        ten.connection_string,
        partition_id="0",
        count=10 - first,
        starting_position=offset,
        inclusive=inclusive,
    )
    assert [e.sequence_number for e in got] == list(range(first, 10))


@pytest.mark.parametrize(("inclusive", "first"), [(False, 5), (True, 0)], ids=["after", "at"])
async def test_from_enqueued_time(ten: TenEvents, inclusive: bool, first: int) -> None:
    first_batch_time = _time(ten.positions[0])
    got = await clients.receive(
        ten.connection_string,
        partition_id="0",
        count=10 - first,
        starting_position=first_batch_time,
        inclusive=inclusive,
    )
    assert [e.sequence_number for e in got] == list(range(first, 10))


async def test_latest_gives_only_new_events(eventhubs_hub: EventHubTarget) -> None:
    await clients.send(eventhubs_hub.connection_string, ["old"], partition_id="0")
    receiving = asyncio.create_task(
        clients.receive(
            eventhubs_hub.connection_string, partition_id="0", count=1, starting_position="@latest"
        )
    )
    for _ in range(200):  # until the receiver is attached
        if eventhubs_hub.emulator.receiver_count(eventhubs_hub.name, "$Default", "0"):
            break
        await asyncio.sleep(0.05)
    await clients.send(eventhubs_hub.connection_string, ["new"], partition_id="0")
    got = await receiving
    assert [(e.sequence_number, e.body_as_str()) for e in got] == [(1, "new")]


async def test_runtime_metrics(ten: TenEvents) -> None:
    client = AioConsumer.from_connection_string(
        ten.connection_string, consumer_group="$Default", load_balancing_interval=0.5
    )
    seen: list[dict[str, Any]] = []

    async def on_event(context: Any, event: Any) -> None:
        seen.append(dict(context.last_enqueued_event_properties))

    task = asyncio.create_task(
        client.receive(
            on_event,
            partition_id="0",
            starting_position="-1",
            track_last_enqueued_event_properties=True,
        )
    )
    for _ in range(200):
        if seen:
            break
        await asyncio.sleep(0.05)
    await client.close()
    await asyncio.wait_for(task, 10)
    last = ten.positions[-1]
    assert seen[0]["sequence_number"] == last.sequence_number
    assert seen[0]["offset"] == str(last.offset)
    assert seen[0]["enqueued_time"] == _time(last)
    assert seen[0]["retrieval_time"] >= _time(last)


async def test_consumer_groups_read_independently(eventhubs_hub: EventHubTarget) -> None:
    await clients.send(eventhubs_hub.connection_string, ["a", "b", "c"], partition_id="2")
    default, analytics = await asyncio.gather(
        clients.receive(eventhubs_hub.connection_string, partition_id="2", count=3),
        clients.receive(
            eventhubs_hub.connection_string, partition_id="2", count=3, consumer_group="analytics"
        ),
    )
    assert [e.body_as_str() for e in default] == ["a", "b", "c"]
    assert [e.body_as_str() for e in analytics] == ["a", "b", "c"]


async def test_receive_waits_for_events(eventhubs_hub: EventHubTarget) -> None:
    client = AioConsumer.from_connection_string(
        eventhubs_hub.connection_string, consumer_group="$Default", load_balancing_interval=0.5
    )
    got: list[object] = []

    async def on_event(context: object, event: object) -> None:
        got.append(event)

    task = asyncio.create_task(client.receive(on_event, partition_id="1", starting_position="-1"))
    # Nothing there yet: the receiver waits (and gets nothing) until an event arrives.
    await asyncio.sleep(1.5)
    assert got == []
    await clients.send(eventhubs_hub.connection_string, ["late"], partition_id="1")
    for _ in range(100):
        if got:
            break
        await asyncio.sleep(0.05)
    await client.close()
    await asyncio.wait_for(task, 10)
    assert [e.body_as_str() for e in got] == ["late"]  # type: ignore[attr-defined]
