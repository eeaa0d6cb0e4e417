"""The SDK's own reconnect of a receive link while the handler is behind, met by the pod's
receiver through the unmodified SDK on the local emulator.

While the handler is behind (the receiver's buffer full: backpressure), the SDK keeps events
of its own that it has not handed out yet. When its link breaks then (a hung connection closed
by its idle time-out, or a link Event Hubs detached on its own: a service upgrade, a
partition moved, ``amqp:link:detach-forced``), the SDK reopens it after the last event it
handed out, and the new link delivers those kept events a second time. Before, the receiver
met them below its last event and failed the partition as if its stream had been replaced:
the worker restarted from its last checkpoint, and every event after it was processed twice.
Now the partition goes on, none lost, none twice, on the same connection count as a reconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient

from eventhub_balancer.adapters import deliveries, receiving
from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget

#: The idle timeout the receiver's clients advertise in these tests.
IDLE_S = 1.0
#: The receiver's buffer and the SDK's prefetch: small, so that both fill at once.
BUFFERED = 10
#: The events sent before the link breaks: 5 taken, the receiver's buffer full, and fewer
#: than `BUFFERED` left in the SDK's, which it reads its connection under (so that it meets
#: the break at once, not only after the handler caught up).
SENT = 30

Send = Callable[[str, int], Awaitable[None]]


@pytest.fixture(autouse=True)
def short_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiving, "IDLE_TIMEOUT_S", IDLE_S)


@pytest.fixture
async def send(eventhubs_hub: EventHubTarget) -> AsyncIterator[Send]:
    """Sends to partition 0 on one connection kept open (so that connections are counted)."""
    async with EventHubProducerClient.from_connection_string(
        eventhubs_hub.connection_string
    ) as producer:

        async def sending(prefix: str, count: int) -> None:
            batch = await producer.create_batch(partition_id="0")
            for i in range(count):
                batch.add(EventData(f"{prefix}{i}"))
            await producer.send_batch(batch)

        yield sending


def receiver(
    target: EventHubTarget,
    position: deliveries.ReceivePosition | None = None,
) -> receiving.PartitionReceiver:
    emu = target.emulator
    return receiving.PartitionReceiver(
        address=receiving.EventHubAddress(
            emu.fully_qualified_namespace, target.name, connection_string=emu.connection_string()
        ),
        partition="0",
        epoch=1,
        position=position or deliveries.ReceivePosition.earliest(),
        prefetch=BUFFERED,
        buffer_limit=BUFFERED,
    )


async def received(running: receiving.PartitionReceiver, *, count: int) -> list[int]:
    numbers: list[int] = []
    async with asyncio.timeout(clients.RECEIVE_TIMEOUT_S):
        while len(numbers) < count:
            batch = await running.next_batch(max_size=100, max_wait=0.1)
            numbers += [e.sequence_number for e in batch.events]
    return numbers


async def behind_then(
    target: EventHubTarget, send: Send, breaking: Callable[[], int]
) -> tuple[list[int], int]:
    """Receive 5 of `SENT` events, stop taking (both buffers fill), break the link with
    ``breaking``, send 5 more while still behind, then take everything: the sequence numbers
    received and how many connections the receiver opened meanwhile."""
    emu = target.emulator
    await send("e", SENT)
    running = receiver(target)
    running.start()
    try:
        first = await received(running, count=5)
        await asyncio.sleep(0.5)  # the SDK fills its own buffer behind the receiver's
        accepted = emu.connections_accepted()
        assert breaking() == 1
        await asyncio.sleep(3 * IDLE_S)  # the SDK reconnects while nothing is taken
        await send("f", 5)
        await asyncio.sleep(IDLE_S)
        rest = await received(running, count=SENT + 5 - len(first))
        return first + rest, emu.connections_accepted() - accepted
    finally:
        await running.close()


async def test_a_hung_connection_while_the_handler_is_behind_loses_and_repeats_nothing(
    eventhubs_hub: EventHubTarget, send: Send
) -> None:
    emu = eventhubs_hub.emulator
    numbers, reconnected = await behind_then(
        eventhubs_hub, send, lambda: emu.hang(eventhubs_hub.name, partitions=["0"])
    )
    assert numbers == list(range(SENT + 5))  # none lost, none twice, the partition did not fail
    assert reconnected >= 1  # the SDK's own reconnect, after the idle time-out found the hang


async def test_a_link_detached_while_the_handler_is_behind_loses_and_repeats_nothing(
    eventhubs_hub: EventHubTarget, send: Send
) -> None:
    emu = eventhubs_hub.emulator
    numbers, _ = await behind_then(
        eventhubs_hub, send, lambda: emu.detach(eventhubs_hub.name, partitions=["0"])
    )
    assert numbers == list(range(SENT + 5))  # none lost, none twice, the partition did not fail


async def test_a_link_opened_at_an_inclusive_position_and_detached_goes_on_after_its_last_event(
    eventhubs_hub: EventHubTarget, send: Send
) -> None:
    """A link opened at an event (inclusive: a start by time, say) that the SDK reopened
    delivered the last event it had handed out a second time."""
    emu = eventhubs_hub.emulator
    await send("e", 5)
    running = receiver(eventhubs_hub, deliveries.ReceivePosition.at(0))
    running.start()
    try:
        first = await received(running, count=5)
        assert emu.detach(eventhubs_hub.name, partitions=["0"]) == 1
        await asyncio.sleep(IDLE_S)  # the SDK reattaches
        await send("f", 5)
        rest = await received(running, count=5)
    finally:
        await running.close()
    assert first + rest == list(range(10))
