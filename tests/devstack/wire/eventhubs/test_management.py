"""Hub and partition properties, partition ids, not-found errors, several hubs."""

from __future__ import annotations

import datetime

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer
from azure.eventhub.aio import EventHubProducerClient as AioProducer

from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget


def test_hub_properties_sync(eventhubs_hub: EventHubTarget) -> None:
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5)
    with EventHubProducerClient.from_connection_string(eventhubs_hub.connection_string) as p:
        props = p.get_eventhub_properties()
        ids = p.get_partition_ids()
    assert props["eventhub_name"] == eventhubs_hub.name
    assert props["partition_ids"] == ["0", "1", "2", "3"]
    assert ids == ["0", "1", "2", "3"]
    assert props["created_at"] >= before


async def test_partition_properties_aio(eventhubs_hub: EventHubTarget) -> None:
    async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as p:
        empty = await p.get_partition_properties("2")
        batch = await p.create_batch(partition_id="2")
        for i in range(5):
            batch.add(EventData(f"event {i}"))
        await p.send_batch(batch)
        full = await p.get_partition_properties("2")
    assert empty["is_empty"] is True
    assert empty["last_enqueued_sequence_number"] == -1
    assert full["is_empty"] is False
    assert full["id"] == "2"
    assert full["eventhub_name"] == eventhubs_hub.name
    assert full["beginning_sequence_number"] == 0
    assert full["last_enqueued_sequence_number"] == 4
    events = await clients.receive(eventhubs_hub.connection_string, partition_id="2", count=5)
    assert events[-1].offset == full["last_enqueued_offset"]
    assert events[-1].enqueued_time == full["last_enqueued_time_utc"]
    info = eventhubs_hub.emulator.partition_info(eventhubs_hub.name, "2")
    assert info.last_enqueued_sequence_number == 4
    assert str(info.last_enqueued_offset) == full["last_enqueued_offset"]


def test_unknown_hub_is_not_found_sync(eventhubs_emulator: object) -> None:
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

    assert isinstance(eventhubs_emulator, EventHubsEmulator)
    conn = eventhubs_emulator.connection_string("no-such-hub")
    with (
        EventHubProducerClient.from_connection_string(conn, retry_total=0) as p,
        pytest.raises(eh_exceptions.EventHubError, match=r"could not be found|404"),
    ):
        p.get_eventhub_properties()


async def test_unknown_partition_is_refused_aio(eventhubs_hub: EventHubTarget) -> None:
    async with AioProducer.from_connection_string(
        eventhubs_hub.connection_string, retry_total=0
    ) as p:
        with pytest.raises(eh_exceptions.EventHubError, match=r"400|invalid"):
            await p.get_partition_properties("9")
        with pytest.raises(eh_exceptions.EventHubError):
            await p.send_batch([EventData("x")], partition_id="9")


async def test_unknown_consumer_group_is_not_found(eventhubs_hub: EventHubTarget) -> None:
    client = AioConsumer.from_connection_string(
        eventhubs_hub.connection_string,
        consumer_group="nobody",
        retry_total=0,
        load_balancing_interval=0.5,
    )
    errors: list[Exception] = []

    async def on_error(context: object, error: Exception) -> None:
        errors.append(error)

    async def on_event(context: object, event: object) -> None:
        raise AssertionError("no event expected")

    import asyncio

    task = asyncio.create_task(client.receive(on_event, partition_id="0", on_error=on_error))
    for _ in range(100):
        if errors:
            break
        await asyncio.sleep(0.1)
    await client.close()
    await asyncio.wait_for(task, 10)
    assert errors
    assert "could not be found" in str(errors[0]) or "not-found" in str(errors[0])


async def test_several_hubs_are_independent(eventhubs_emulator: object) -> None:
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

    assert isinstance(eventhubs_emulator, EventHubsEmulator)
    eventhubs_emulator.create_hub("several-a", 2)
    eventhubs_emulator.create_hub("several-b", 3)
    await clients.send(eventhubs_emulator.connection_string("several-a"), ["a"], partition_id="1")
    await clients.send(
        eventhubs_emulator.connection_string("several-b"), ["b", "b"], partition_id="1"
    )
    async with AioProducer.from_connection_string(
        eventhubs_emulator.connection_string(), eventhub_name="several-b"
    ) as p:
        assert await p.get_partition_ids() == ["0", "1", "2"]
        assert (await p.get_partition_properties("1"))["last_enqueued_sequence_number"] == 1
    info_a = eventhubs_emulator.partition_info("several-a", "1")
    assert info_a.last_enqueued_sequence_number == 0
