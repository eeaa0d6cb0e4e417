"""`adapters.eventhubs` against the Event Hubs emulator: ids, the cache, and wrapped errors."""

from __future__ import annotations

import time

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import eventhubs
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator, emulator
from tests.support.fixtures.eventhubs import EventHubTarget

#: The emulator's key; it must never appear in an error message.
SECRET = emulator.KEY


def coordinates(emu: EventHubsEmulator, hub: str) -> eventhubs.Coordinates:
    return eventhubs.Coordinates(
        fully_qualified_namespace=emu.fully_qualified_namespace,
        eventhub_name=hub,
        connection_string=emu.connection_string(),
    )


async def test_partition_ids_and_last_sequence_numbers(eventhubs_hub: EventHubTarget) -> None:
    where = coordinates(eventhubs_hub.emulator, eventhubs_hub.name)
    assert await eventhubs.fetch_partition_ids(where) == ["0", "1", "2", "3"]
    async with EventHubProducerClient.from_connection_string(
        eventhubs_hub.connection_string
    ) as producer:
        batch = await producer.create_batch(partition_id="2")
        for i in range(3):
            batch.add(EventData(f"e{i}"))
        await producer.send_batch(batch)
    ends = await eventhubs.fetch_last_sequence_numbers(where, ["0", "2"])
    assert {p: e.last_sequence_number for p, e in ends.items()} == {"0": -1, "2": 2}
    # Nothing processed on either: partition 2's three events wait, and none on 0.
    assert {p: e.waiting_after(-1) for p, e in ends.items()} == {"0": 0, "2": 3}


async def test_events_retention_removed_do_not_count_as_waiting() -> None:
    """A partition holds its last 10 of 5,000 events: a checkpoint of "nothing processed"
    (an ``earliest`` seed) has 10 events waiting, not 5,000 (which asked an autoscaler for
    5 more pods)."""
    async with EventHubsEmulator(hubs={"kept": 2}, retention_events=10) as emu:
        connection = emu.connection_string("kept")
        async with EventHubProducerClient.from_connection_string(connection) as producer:
            for _ in range(10):
                batch = await producer.create_batch(partition_id="0")
                for i in range(500):
                    batch.add(EventData(f"e{i}"))
                await producer.send_batch(batch)
        ends = await eventhubs.fetch_last_sequence_numbers(coordinates(emu, "kept"), ["0", "1"])
    assert ends["0"].last_sequence_number == 4_999
    assert ends["0"].waiting_after(-1) == 10
    assert ends["0"].waiting_after(4_994) == 5
    assert ends["1"].waiting_after(-1) == 0


async def test_cache_serves_young_lists_and_refreshes_old_ones(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu, hub = eventhubs_hub.emulator, eventhubs_hub.name
    cache = eventhubs.PartitionCache(refresh_seconds=60.0, timeout=5.0)
    first = await cache.partition_ids("ns/c", coordinates(emu, hub), now=1000.0)
    assert (first.ids, first.fresh) == (("0", "1", "2", "3"), True)
    emu.add_partitions(hub, 6)
    young = await cache.partition_ids("ns/c", coordinates(emu, hub), now=1059.0)
    assert (young.ids, young.fresh) == (("0", "1", "2", "3"), False)  # growth not seen yet
    old = await cache.partition_ids("ns/c", coordinates(emu, hub), now=1060.0)
    assert (old.ids, old.fresh) == (("0", "1", "2", "3", "4", "5"), True)
    assert cache.cached("ns/c") == old
    # Another hub under the same consumer key is never served from the cache.
    emu.create_hub(f"{hub}-other", 2)
    other = await cache.partition_ids("ns/c", coordinates(emu, f"{hub}-other"), now=1061.0)
    assert (other.ids, other.fresh) == (("0", "1"), True)


async def test_wrong_hub_is_event_hub_not_found(eventhubs_hub: EventHubTarget) -> None:
    hubs = eventhubs.EventHubs(timeout=5.0)
    with pytest.raises(errors.EventHubNotFound) as e:
        await hubs.partitions(
            consumer="ns/c",
            fully_qualified_namespace=eventhubs_hub.emulator.fully_qualified_namespace,
            eventhub_name="no-such-hub",
            connection_string=eventhubs_hub.namespace_connection_string,
            client_id=None,
            now=0.0,
        )
    assert e.value.reason == "EventHubNotFound"
    assert "fix spec.eventHub.name" in str(e.value)
    assert SECRET not in str(e.value)
    assert hubs.cached("ns/c") is None  # a failure caches nothing


async def test_mismatched_or_malformed_connection_strings_say_what_to_fix() -> None:
    bad_entity = eventhubs.Coordinates(
        fully_qualified_namespace="x.servicebus.windows.net",
        eventhub_name="orders",
        connection_string=f"Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey={SECRET};"
        "EntityPath=payments",
    )
    with pytest.raises(errors.ConfigurationError) as mismatch:
        await eventhubs.fetch_partition_ids(bad_entity)
    assert "'payments'" in str(mismatch.value)
    assert "make them agree" in str(mismatch.value)
    malformed = eventhubs.Coordinates(
        fully_qualified_namespace="x.servicebus.windows.net",
        eventhub_name="orders",
        connection_string=f"SharedAccessKey={SECRET}",
    )
    with pytest.raises(errors.ConfigurationError) as broken:
        await eventhubs.fetch_partition_ids(malformed)
    for e in (mismatch.value, broken.value):
        assert SECRET not in str(e)
    assert SECRET not in repr(malformed)


async def test_stopped_emulator_is_unreachable_within_the_timeout(
    private_eventhubs_emulator: EventHubsEmulator,
) -> None:
    emu = private_eventhubs_emulator
    emu.create_hub("orders", 2)
    where = coordinates(emu, "orders")
    assert await eventhubs.fetch_partition_ids(where, limit_seconds=3.0) == ["0", "1"]
    emu.stop_in_thread()
    started = time.monotonic()
    with pytest.raises(errors.EventHubUnreachable) as e:
        await eventhubs.fetch_partition_ids(where, limit_seconds=3.0)
    elapsed = time.monotonic() - started
    # Bounded (not hanging on the SDK's retries): the limit plus closing the client, generously.
    assert elapsed < 3.0 + 10.0, elapsed
    assert e.value.reason == "EventHubUnreachable"
    assert isinstance(e.value, errors.TransientError)
    assert SECRET not in str(e.value)


async def test_kept_clients_list_a_hub_over_one_connection_and_replace_it_once_closed(
    private_eventhubs_emulator: EventHubsEmulator,
) -> None:
    """A kept client's listings share one AMQP connection and one ``$management`` link
    (`mgmtconnections`): before, each listing opened a connection, so the growth watch opened
    up to 20 a second, and then each still opened a session, a token and a link."""
    emu = private_eventhubs_emulator
    emu.create_hub("orders", 4)
    clients = eventhubs.Clients()
    where = coordinates(emu, "orders")
    ids = ["0", "1", "2", "3"]
    try:
        accepted = emu.connections_accepted()
        links = emu.request_links_attached("management")
        for _ in range(10):
            assert await eventhubs.fetch_partition_ids(where, clients=clients) == ids
        assert emu.connections_accepted() - accepted == 1
        assert emu.request_links_attached("management") - links == 1
        # The ends of a hub are asked for side by side, and read one after another on the
        # kept connection and link: no connection more.
        last = await eventhubs.fetch_last_sequence_numbers(where, ids, clients=clients)
        assert {p: e.last_sequence_number for p, e in last.items()} == dict.fromkeys(ids, -1)
        assert emu.connections_accepted() - accepted == 1
        assert emu.request_links_attached("management") - links == 1
        accepted = emu.connections_accepted()
        assert await eventhubs.fetch_partition_ids(where, clients=clients) == ids
        assert emu.connections_accepted() == accepted  # the kept one is lent again
        assert (clients.opened, len(clients)) == (1, 1)
        # The service closes every connection (as it closes idle ones): the next listing is
        # still served, on a new connection. Either the kept one is seen closed before it is
        # lent, or the request on it fails at once and `Clients` builds the client anew; a
        # request that waited on it for an answer would time out, and fail.
        assert emu.disconnect_all() >= 1
        assert await eventhubs.fetch_partition_ids(where, clients=clients) == ids
        assert emu.connections_accepted() > accepted
        assert clients.opened <= 2
    finally:
        await clients.close()
    assert len(clients) == 0


async def test_a_hubs_ends_are_read_in_batches_on_one_connection(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    hub = f"{eventhubs_hub.name}-wide"
    emu.create_hub(hub, 40)  # more than two batches of `PROPERTIES_AT_ONCE`
    clients = eventhubs.Clients()
    try:
        ids = [str(i) for i in range(40)]
        last = await eventhubs.fetch_last_sequence_numbers(
            coordinates(emu, hub), ids, clients=clients
        )
    finally:
        await clients.close()
    assert {p: e.last_sequence_number for p, e in last.items()} == dict.fromkeys(ids, -1)
    assert clients.opened == 1
