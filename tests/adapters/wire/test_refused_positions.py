"""A receive position past the partition's end, refused by the Event Hubs emulator as Azure
refuses it, read by the pod's receiver through the unmodified SDK: the receiver ends at once
with the service's words, never a loop of reopens (``tests/adapters/test_refused_positions.py``
holds the same on fake time)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, receiving
from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget


async def nothing_until_it_fails(running: receiving.PartitionReceiver, *, within: float) -> None:
    async with asyncio.timeout(within):
        while True:
            assert (await running.next_batch(max_size=10, max_wait=0.1)).events == []


async def test_the_receiver_ends_at_once_on_a_position_past_the_end(
    eventhubs_hub: EventHubTarget, caplog: pytest.LogCaptureFixture
) -> None:
    emu = eventhubs_hub.emulator
    await clients.send(
        eventhubs_hub.connection_string, [f"e{i}" for i in range(5)], partition_id="0"
    )
    running = receiving.PartitionReceiver(
        address=receiving.EventHubAddress(
            emu.fully_qualified_namespace,
            eventhubs_hub.name,
            connection_string=emu.connection_string(),
        ),
        partition="0",
        epoch=2,
        position=deliveries.ReceivePosition.after(12),
    )
    running.start()
    try:
        with (
            caplog.at_level(logging.WARNING, logger=receiving.__name__),
            pytest.raises(errors.EventHubUnreachable) as raised,
        ):
            await nothing_until_it_fails(running, within=5)  # six reopens took over 15 s
    finally:
        await running.close()
    assert str(raised.value) == (
        "partition 0: Event Hubs refused the receive position: The supplied sequence number "
        "'12' is invalid. The last sequence number in the system is '4'"
    )
    assert [r.getMessage() for r in caplog.records] == []
    assert emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 0
