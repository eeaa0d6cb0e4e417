"""Hub and partition properties, partition ids, not-found errors, several hubs."""

from __future__ import annotations

import datetime

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub._pyamqp import error as pyamqp_errors
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


async def test_unknown_consumer_group_is_refused_as_event_hubs_refuses_it(
    eventhubs_hub: EventHubTarget,
) -> None:
    """Event Hubs refuses a receiver on a consumer group that does not exist with an attach
    that has no source or target (the link never opens), then a detach with
    ``amqp:not-found`` whose description names the entity ``<ns>:eventhub:<hub>~<n>|<group>``.
    The SDK's per-partition consumer raises it from its open."""
    client = AioConsumer.from_connection_string(
        eventhubs_hub.connection_string, consumer_group="nobody", retry_total=0
    )

    async def on_event(events: object) -> None:
        raise AssertionError("no event expected")

    consumer = client._create_consumer("nobody", "0", "-1", on_event)
    try:
        with pytest.raises(pyamqp_errors.AMQPLinkError) as refused:
            await consumer._open()
    finally:
        await consumer.close()
        await client.close()
    assert refused.value.condition == pyamqp_errors.ErrorCondition.NotFound
    assert (
        refused.value.description
        == (
            f"The messaging entity 'emulator:eventhub:{eventhubs_hub.name}~32766|nobody' could not "
            "be found. To know more visit https://aka.ms/sbResourceMgrExceptions."
        ).encode()
    )


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
