"""Sends: single, batch, partition key, round robin, to a partition; sync and aio."""

from __future__ import annotations

import collections

from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub._buffered_producer import _partition_resolver
from azure.eventhub.aio import EventHubProducerClient as AioProducer

from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget


def _counts(target: EventHubTarget) -> dict[str, int]:
    return {
        p: target.emulator.partition_info(target.name, p).retained_events
        for p in target.emulator.partition_ids(target.name)
    }


def test_single_events_and_batches_sync(eventhubs_hub: EventHubTarget) -> None:
    with EventHubProducerClient.from_connection_string(eventhubs_hub.connection_string) as p:
        p.send_event(EventData("one"), partition_id="3")
        batch = p.create_batch(partition_id="3")
        for i in range(20):
            batch.add(EventData(f"batched {i}"))
        p.send_batch(batch)
        p.send_batch([EventData("list 1"), EventData("list 2")], partition_id="3")
    assert _counts(eventhubs_hub) == {"0": 0, "1": 0, "2": 0, "3": 23}


async def test_partition_key_routes_like_the_service(eventhubs_hub: EventHubTarget) -> None:
    keys = [f"customer-{i}" for i in range(12)]
    async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as p:
        for key in keys:
            batch = await p.create_batch(partition_key=key)
            batch.add(EventData(key))
            batch.add(EventData(key))
            await p.send_batch(batch)
        await p.send_event(EventData("single keyed"), partition_key="customer-0")
    resolver = _partition_resolver.PartitionResolver(["0", "1", "2", "3"])
    expected = collections.Counter()
    for key in keys:
        expected[resolver.get_partition_id_by_partition_key(key)] += 2
    expected[resolver.get_partition_id_by_partition_key("customer-0")] += 1
    counts = _counts(eventhubs_hub)
    assert {p: n for p, n in counts.items() if n} == dict(expected)
    # Every delivered event carries its key (the SDK hands it out as bytes).
    partition = resolver.get_partition_id_by_partition_key("customer-0")
    events = await clients.receive(
        eventhubs_hub.connection_string, partition_id=partition, count=counts[partition]
    )
    assert all(e.partition_key and e.partition_key.startswith(b"customer-") for e in events)
    assert [e.partition_key for e in events].count(b"customer-0") == 3


async def test_round_robin_spreads_over_partitions(eventhubs_hub: EventHubTarget) -> None:
    async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as p:
        for i in range(8):
            await p.send_event(EventData(f"rr {i}"))
    assert _counts(eventhubs_hub) == {"0": 2, "1": 2, "2": 2, "3": 2}


async def test_event_content_survives(eventhubs_hub: EventHubTarget) -> None:
    async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as p:
        event = EventData(b"\x00\x01binary body")
        event.properties = {"kind": "order", "n": 7}
        event.content_type = "application/octet-stream"
        event.correlation_id = "corr-1"
        event.message_id = "msg-1"
        await p.send_event(event, partition_id="1")
    [got] = await clients.receive(eventhubs_hub.connection_string, partition_id="1", count=1)
    assert got.body_as_str(encoding="latin-1") == "\x00\x01binary body"
    assert got.properties == {b"kind": b"order", b"n": 7}
    assert got.content_type == "application/octet-stream"
    assert got.correlation_id == "corr-1"
    assert got.message_id == "msg-1"
    assert got.sequence_number == 0
    assert got.offset == "0"
    assert got.enqueued_time is not None


async def test_too_large_batch_is_refused(eventhubs_hub: EventHubTarget) -> None:
    async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as p:
        batch = await p.create_batch(partition_id="0")
        # The SDK sizes batches by the link's max-message-size (1 MB): it refuses more.
        added = 0
        for _ in range(2000):
            try:
                batch.add(EventData(b"x" * 1000))
            except ValueError as e:
                assert "size limit: 1048576" in str(e)  # noqa: PT017
                break
            added += 1
    assert 1000 <= added < 1048
    assert batch.size_in_bytes <= 1024 * 1024
