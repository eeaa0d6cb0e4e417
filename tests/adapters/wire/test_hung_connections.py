"""A receive connection that hangs (a NAT gateway or firewall that silently lost the flow: the
socket open, every packet dropped), met by the pod's receiver through the unmodified SDK on
the local emulator, which hangs connections on demand and, like Event Hubs, sends empty
frames at half the idle-time-out a client advertises.

The receiver's clients advertise `receiving.IDLE_TIMEOUT_S`: a connection that hears nothing
for that long, not even a heartbeat, is closed and the link reopened on a new one, so that
the partition goes on from its last event. Before, nothing failed and nothing was reported:
the partition waited, unprocessed, for as long as the connection stayed hung. A healthy
connection with nothing to deliver hears the heartbeats and is kept, and so is one the pod
stopped reading for longer than the idle time-out (a handler behind, its buffer full): the
heartbeats that wait on its socket are read before it is judged idle. The idle timeout is
shortened here so that the tests take seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient

from eventhub_balancer.adapters import deliveries, receiving
from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget

#: The idle timeout the receiver's clients advertise in these tests.
IDLE_S = 1.0
#: How soon after a hang the partition must go on: the idle timeout, the SDK's own retry
#: (under a second) and a new connection, with room for a loaded machine.
REOPEN_BOUND_S = 10.0


@pytest.fixture(autouse=True)
def short_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiving, "IDLE_TIMEOUT_S", IDLE_S)


def receiver(target: EventHubTarget, *, buffered: int = 2000) -> receiving.PartitionReceiver:
    emu = target.emulator
    return receiving.PartitionReceiver(
        address=receiving.EventHubAddress(
            emu.fully_qualified_namespace, target.name, connection_string=emu.connection_string()
        ),
        partition="0",
        epoch=1,
        position=deliveries.ReceivePosition.earliest(),
        prefetch=min(300, buffered),
        buffer_limit=buffered,
    )


async def received(
    running: receiving.PartitionReceiver, *, count: int, within: float = clients.RECEIVE_TIMEOUT_S
) -> list[int]:
    numbers: list[int] = []
    async with asyncio.timeout(within):
        while len(numbers) < count:
            batch = await running.next_batch(max_size=100, max_wait=0.1)
            numbers += [e.sequence_number for e in batch.events]
    return numbers


async def test_a_hung_receive_connection_is_closed_and_the_partition_goes_on(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    send = eventhubs_hub.connection_string
    await clients.send(send, [f"e{i}" for i in range(5)], partition_id="0")
    running = receiver(eventhubs_hub)
    running.start()
    try:
        first = await received(running, count=5)
        assert emu.hang(eventhubs_hub.name, partitions=["0"]) == 1
        hung_at = time.monotonic()
        await clients.send(send, [f"f{i}" for i in range(5)], partition_id="0")
        try:
            rest = await received(running, count=5, within=REOPEN_BOUND_S)
        except TimeoutError:
            pytest.fail(f"the partition received nothing within {REOPEN_BOUND_S} s of the hang")
        took = time.monotonic() - hung_at
    finally:
        await running.close()
    assert first + rest == list(range(10))  # none lost, none twice
    assert took >= IDLE_S  # the hang was found by the idle timeout, not by chance


async def test_an_idle_healthy_receive_connection_is_kept(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    send = eventhubs_hub.connection_string
    await clients.send(send, [f"e{i}" for i in range(5)], partition_id="0")
    running = receiver(eventhubs_hub)
    running.start()
    try:
        first = await received(running, count=5)
        accepted = emu.connections_accepted()
        await asyncio.sleep(4 * IDLE_S)  # nothing to deliver: only the heartbeats arrive
        reconnected = emu.connections_accepted() - accepted
        await clients.send(send, [f"f{i}" for i in range(5)], partition_id="0")
        rest = await received(running, count=5)
    finally:
        await running.close()
    assert reconnected == 0  # the receiver's connection was not closed while idle
    assert first + rest == list(range(10))


async def test_a_receive_connection_left_unread_while_the_handler_is_behind_is_kept(
    eventhubs_hub: EventHubTarget,
) -> None:
    """A handler slower than the idle time-out, its buffer full: the pod stops reading the
    connection (backpressure) while events keep arriving. Before, the first read after the
    pause judged the connection idle before reading the heartbeats waiting on its socket,
    closed it, and the SDK's reconnect delivered buffered events again: the partition failed
    as if its stream had been replaced."""
    emu = eventhubs_hub.emulator
    async with EventHubProducerClient.from_connection_string(
        eventhubs_hub.connection_string
    ) as producer:

        async def send(prefix: str, count: int) -> None:
            batch = await producer.create_batch(partition_id="0")
            for i in range(count):
                batch.add(EventData(f"{prefix}{i}"))
            await producer.send_batch(batch)

        await send("e", 50)  # the producer's connection is open from here on
        running = receiver(eventhubs_hub, buffered=10)
        running.start()
        try:
            first = await received(running, count=5)
            accepted = emu.connections_accepted()
            for _ in range(4):  # the handler takes nothing for 4 idle time-outs
                await asyncio.sleep(IDLE_S)
                await send("p", 5)
            rest = await received(running, count=70 - len(first))
            reconnected = emu.connections_accepted() - accepted
        finally:
            await running.close()
    assert first + rest == list(range(70))  # none lost, none twice
    assert reconnected == 0  # the healthy connection was not closed
