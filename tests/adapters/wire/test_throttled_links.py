"""A throttled Event Hubs, as the local emulator throttles on demand (``com.microsoft:server-busy``
with ``Please wait N seconds``), met by the pod's receiver through the unmodified SDK: each
reopen waits at least what the service asked, and the partition goes on from its last event,
none lost, none twice (``tests/adapters/test_throttled_links.py`` holds the same on fake
time). Before, the receiver reopened after 0.5, 1 and 2 s whatever Event Hubs had asked."""

from __future__ import annotations

import asyncio
import itertools

from eventhub_balancer.adapters import deliveries, receiving
from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget

#: What the emulator asks a throttled client to wait, and how long it throttles: long enough
#: that the receiver's first reopen (the wait and at most a quarter more) is refused too, even
#: when a loaded machine is slow to make the first attach, so that there is a gap to measure.
WAIT_S = 2
THROTTLE_S = 6.0


def receiver(target: EventHubTarget) -> receiving.PartitionReceiver:
    emu = target.emulator
    return receiving.PartitionReceiver(
        address=receiving.EventHubAddress(
            emu.fully_qualified_namespace, target.name, connection_string=emu.connection_string()
        ),
        partition="0",
        epoch=1,
        position=deliveries.ReceivePosition.earliest(),
    )


async def received(running: receiving.PartitionReceiver, *, count: int) -> list[int]:
    numbers: list[int] = []
    async with asyncio.timeout(clients.RECEIVE_TIMEOUT_S):
        while len(numbers) < count:
            batch = await running.next_batch(max_size=100, max_wait=0.1)
            numbers += [e.sequence_number for e in batch.events]
    return numbers


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def test_a_receiver_refused_as_throttled_reopens_no_sooner_than_asked(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    await clients.send(
        eventhubs_hub.connection_string, [f"e{i}" for i in range(5)], partition_id="0"
    )
    emu.throttle(eventhubs_hub.name, seconds=THROTTLE_S, partitions=["0"], wait_seconds=WAIT_S)
    running = receiver(eventhubs_hub)
    running.start()
    try:
        numbers = await received(running, count=5)
    finally:
        await running.close()
    assert numbers == [0, 1, 2, 3, 4]
    refused = emu.throttled_attaches(eventhubs_hub.name)
    assert len(refused) >= 2
    assert min(gaps(refused)) >= WAIT_S, gaps(refused)  # were 0.5 and 1 s apart


async def test_a_receiver_detached_as_throttled_waits_and_goes_on(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    send = eventhubs_hub.connection_string
    await clients.send(send, [f"e{i}" for i in range(5)], partition_id="0")
    running = receiver(eventhubs_hub)
    running.start()
    try:
        first = await received(running, count=5)
        detached = emu.throttle(
            eventhubs_hub.name, seconds=THROTTLE_S, partitions=["0"], wait_seconds=WAIT_S
        )
        await clients.send(send, [f"f{i}" for i in range(5)], partition_id="0")
        rest = await received(running, count=5)
    finally:
        await running.close()
    assert detached == 1
    assert first + rest == list(range(10))  # none lost, none twice
    refused = emu.throttled_attaches(eventhubs_hub.name)
    # The SDK reattaches once at once by itself; the receiver's own reopens wait.
    assert len(refused) >= 2
    assert min(gaps(refused)) >= WAIT_S, gaps(refused)  # was 0.5 s
