"""Garbage, wrong headers, vanishing clients, hundreds of links, growth, retention."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer
from azure.eventhub.aio import EventHubProducerClient as AioProducer

from eventhub_balancer_devstack.eventhubs import EventHubsEmulator, connections
from eventhub_balancer_devstack.eventhubs.amqp import performatives as perf
from tests.support import eventhubclients as clients
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.eventhubs import EventHubTarget

WAIT_S = 20.0
CLIENTS = 12
PARTITIONS = 25


def _raw(emu: EventHubsEmulator, data: bytes) -> bytes:
    """Send ``data`` on a fresh socket; return everything until the server hangs up."""
    with socket.create_connection(("127.0.0.1", emu.port), timeout=WAIT_S) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


async def _wait_for(condition: Any, wait_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + wait_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.05)


def _open_links(emu: EventHubsEmulator, groups: tuple[str, ...], partitions: list[str]) -> int:
    return sum(emu.receiver_count("many-links", g, p) for g in groups for p in partitions)


async def test_garbage_closes_only_that_connection(eventhubs_hub: EventHubTarget) -> None:
    emu = eventhubs_hub.emulator
    async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as producer:
        await producer.send_event(EventData("before"), partition_id="0")
        # A wrong protocol header: the server answers with its own and hangs up.
        assert (
            await asyncio.to_thread(_raw, emu, b"GET / HTTP/1.1\r\n\r\n") == b"AMQP\x00\x01\x00\x00"
        )
        # A valid header, then a frame whose body is garbage: closed with an AMQP error.
        garbage = (
            struct.pack(">IBBH", 20, 2, 0, 0) + b"\x00\x53\x10\xc0\xff\xff\x99\x99\x99\x99\x99\x99"
        )
        answer = await asyncio.to_thread(_raw, emu, b"AMQP\x00\x01\x00\x00" + garbage)
        assert answer.startswith(b"AMQP\x00\x01\x00\x00")
        assert b"amqp:decode-error" in answer
        # A frame header claiming an absurd size.
        answer = await asyncio.to_thread(
            _raw, emu, b"AMQP\x00\x01\x00\x00" + struct.pack(">IBBH", 0xFFFFFF00, 2, 0, 0)
        )
        assert b"amqp:connection:framing-error" in answer
        # The SDK client on its own connection carries on.
        await producer.send_event(EventData("after"), partition_id="0")
    got = await clients.receive(eventhubs_hub.connection_string, partition_id="0", count=2)
    assert [e.body_as_str() for e in got] == ["before", "after"]


async def test_vanished_clients_release_their_partitions(
    private_eventhubs_emulator: EventHubsEmulator,
) -> None:
    emu = private_eventhubs_emulator
    emu.create_hub("vanishing", 2)
    client = AioConsumer.from_connection_string(
        emu.connection_string("vanishing"),
        consumer_group="$Default",
        retry_total=0,
        load_balancing_interval=0.5,
    )

    async def on_event(context: Any, event: Any) -> None:
        return None

    task = asyncio.create_task(client.receive(on_event, partition_id="1", owner_level=3))
    await _wait_for(lambda: emu.receiver_count("vanishing", "$Default", "1") == 1)
    # The broker side drops every connection (as chaos tests do): nothing is left behind.
    assert emu.disconnect_all() >= 1
    await _wait_for(lambda: emu.receiver_count("vanishing", "$Default", "1") in (0, 1))
    await client.close()
    await asyncio.wait_for(task, WAIT_S)
    await _wait_for(lambda: emu.receiver_count("vanishing", "$Default", "1") == 0)
    # A half-open handshake that just goes away leaves no connection behind either.
    sock = socket.create_connection(("127.0.0.1", emu.port), timeout=WAIT_S)
    sock.sendall(b"AMQP\x03\x01\x00\x00")
    await _wait_for(lambda: emu.connection_count() == 1)
    sock.close()
    await _wait_for(lambda: emu.connection_count() == 0)


@pytest.mark.slow  # 13-18 s: the SDK opens one client's links one after another
async def test_hundreds_of_receivers(eventhubs_emulator: EventHubsEmulator) -> None:
    emu = eventhubs_emulator
    emu.create_hub("many-links", PARTITIONS)
    emu.create_consumer_group("many-links", "audit")
    conn = emu.connection_string("many-links")
    # Three groups of 4 clients: Event Hubs (and the emulator) refuses a sixth receiver
    # without owner level on a partition of one group.
    groups = ("$Default", "analytics", "audit")
    partitions = [str(p) for p in range(PARTITIONS)]
    consumers = [
        AioConsumer.from_connection_string(
            conn, consumer_group=groups[i % len(groups)], load_balancing_interval=0.5
        )
        for i in range(CLIENTS)
    ]
    got: dict[tuple[int, str], int] = {}

    def recorder(index: int) -> Any:
        async def on_event(context: Any, event: Any) -> None:
            key = (index, context.partition_id)
            got[key] = got.get(key, 0) + 1

        return on_event

    # 12 clients x 25 partitions = 300 receive links over 12 connections, all open at
    # once (up to 5 clients on one group without owner level may share a partition, as
    # Event Hubs allows). One client opens its links in turn, so the links are spread over
    # many clients: the count of links is what this test is about, not one client's pace
    # (3 clients x 100 partitions, sent one by one, took about 70 s).
    tasks = [
        asyncio.create_task(c.receive(recorder(i), starting_position="-1"))
        for i, c in enumerate(consumers)
    ]
    try:
        await _wait_for(
            lambda: _open_links(emu, groups, partitions) == CLIENTS * PARTITIONS, wait_s=60
        )
        # One event per partition, the partitions' send links opened at once.
        await send_events(emu.connection_string(), "many-links", dict.fromkeys(partitions, 1))
        await _wait_for(lambda: len(got) == CLIENTS * PARTITIONS, wait_s=60)
        assert set(got.values()) == {1}
    finally:
        await asyncio.gather(*(c.close() for c in consumers))
        for t in tasks:
            await asyncio.wait_for(t, WAIT_S)


async def test_partitions_can_be_added_to_a_running_hub(eventhubs_hub: EventHubTarget) -> None:
    async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as producer:
        assert await producer.get_partition_ids() == ["0", "1", "2", "3"]
        eventhubs_hub.emulator.add_partitions(eventhubs_hub.name, 6)
        assert await producer.get_partition_ids() == ["0", "1", "2", "3", "4", "5"]
        await producer.send_event(EventData("on a new partition"), partition_id="5")
    with pytest.raises(ValueError, match="only grow"):
        eventhubs_hub.emulator.add_partitions(eventhubs_hub.name, 2)
    got = await clients.receive(eventhubs_hub.connection_string, partition_id="5", count=1)
    assert got[0].body_as_str() == "on a new partition"


async def test_retention_by_count() -> None:
    async with EventHubsEmulator(hubs={"kept": 1}, retention_events=5) as emu:
        conn = emu.connection_string("kept")
        await clients.send(conn, [f"e{i}" for i in range(12)], partition_id="0")
        async with AioProducer.from_connection_string(conn) as producer:
            props = await producer.get_partition_properties("0")
        assert props["beginning_sequence_number"] == 7
        assert props["last_enqueued_sequence_number"] == 11
        got = await clients.receive(conn, partition_id="0", count=5)
        assert [e.sequence_number for e in got] == [7, 8, 9, 10, 11]
        # A position before the retained range starts at the oldest retained event.
        got = await clients.receive(conn, partition_id="0", count=5, starting_position=2)
        assert got[0].sequence_number == 7


async def test_a_frame_after_the_clients_own_end_is_dropped(
    eventhubs_hub: EventHubTarget, caplog: pytest.LogCaptureFixture
) -> None:
    """pyamqp ends a session, then detaches a link it left in it: every SDK client that closed
    was closed with a framing error, a line each in the emulator's log. A frame on a channel
    that never had a session still closes the connection."""
    emu = eventhubs_hub.emulator
    frames_in = b"".join(
        [
            b"AMQP\x00\x01\x00\x00",
            perf.open_(container_id="raw", max_frame_size=65536, channel_max=7),
            perf.begin(channel=1, remote_channel=0, next_outgoing_id=0, incoming_window=100),
            perf.end(channel=1),
            perf.detach(channel=1, handle=3, closed=True, err=None),  # after its own end
            perf.detach(channel=2, handle=0, closed=True, err=None),  # never begun
        ]
    )
    answer = await asyncio.to_thread(_raw, emu, frames_in)
    assert b"no session on channel 2" in answer
    assert b"no session on channel 1" not in answer
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=connections.__name__):
        async with AioProducer.from_connection_string(eventhubs_hub.connection_string) as p:
            assert await p.get_partition_ids()
    assert "closing with" not in caplog.text
