"""A partition's stream replaced under a running receiver, on fake loop time (looptime).

An Event Hub deleted and created again under its name, or the local emulator restarted,
starts the partition's sequence numbers at 0 again. A receiver's link that reconnected to
it (the SDK's own retry, by offset) handed the new stream's events on, to be checkpointed
below the old checkpoint, which never moves back; one that the receiver reopened after the
last event it had received waited in silence while every new event below that number went
by. Now either ends the receiver with `errors.EventHubUnreachable`: the worker starts again,
and its check at the fence moves the old checkpoint back (``tests/consumer``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from azure.eventhub import exceptions as eh_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, receiving
from tests.support import sdkclients

pytestmark = pytest.mark.looptime

ADDRESS = receiving.EventHubAddress("local.servicebus.windows.net", "orders")


@dataclasses.dataclass
class Stream:
    """Partition 0: events ``0 .. count-1``; its links drop after delivering when told."""

    count: int
    #: So many next links drop (connection lost) once they delivered what they had.
    drops: int = 0
    #: What a link delivers after its own events: the SDK's reconnect reaching another stream.
    then: list[int] = dataclasses.field(default_factory=list)
    #: The SDK position of every link opened.
    opens: list[Any] = dataclasses.field(default_factory=list)
    properties_reads: int = 0


class Link:
    def __init__(self, stream: Stream, position: Any, on_events: Any) -> None:
        self.stream = stream
        self.position = position
        self.on_events = on_events

    async def _open(self) -> None:
        self.stream.opens.append(self.position)

    async def receive(self, *args: Any) -> None:
        first = self.position + 1 if isinstance(self.position, int) else 0
        events = [sdkclients.sdk_event(n) for n in range(first, self.stream.count)]
        if events:
            await self.on_events(events)
        if self.stream.then:
            await asyncio.sleep(1)  # the connection drops, and the SDK reconnects by offset
            await self.on_events([sdkclients.sdk_event(n) for n in self.stream.then])
        if self.stream.drops:
            self.stream.drops -= 1
            raise eh_exceptions.ConnectionLostError("connection lost (injected)")
        await asyncio.sleep(3600)

    async def close(self) -> None:
        """Nothing held."""


class Client:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    def _create_consumer(
        self, group: str, partition: str, position: Any, on_events: Any, **kwargs: Any
    ) -> Link:
        return Link(self.stream, position, on_events)

    async def get_partition_properties(self, partition: str) -> dict[str, Any]:
        self.stream.properties_reads += 1
        return {"last_enqueued_sequence_number": self.stream.count - 1}

    async def close(self) -> None:
        """Nothing held."""


def receiver(monkeypatch: pytest.MonkeyPatch, stream: Stream) -> receiving.PartitionReceiver:
    monkeypatch.setattr(receiving, "make_client", lambda address: Client(stream))
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=1, position=deliveries.ReceivePosition.earliest()
    )
    running.start()
    return running


async def numbers(running: receiving.PartitionReceiver) -> list[int]:
    batch = await running.next_batch(max_size=100, max_wait=0.1)
    return [e.sequence_number for e in batch.events]


async def nothing_until_it_fails(running: receiving.PartitionReceiver) -> None:
    async with asyncio.timeout(30):
        while True:
            assert await numbers(running) == []


async def test_a_reconnect_that_reaches_a_new_stream_ends_the_receiver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = receiver(monkeypatch, Stream(10, then=[0, 1, 2]))
    try:
        assert await numbers(running) == list(range(10))
        with pytest.raises(errors.EventHubUnreachable, match="stream was replaced"):
            await nothing_until_it_fails(running)  # never 0, 1, 2 again
    finally:
        await running.close()


async def test_a_reopen_onto_a_shorter_stream_ends_the_receiver_without_a_link(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = Stream(10, drops=1)
    running = receiver(monkeypatch, stream)
    try:
        assert await numbers(running) == list(range(10))
        stream.count = 3  # created again, 3 events so far
        with pytest.raises(errors.EventHubUnreachable, match=r"its last event is 2, not above"):
            await nothing_until_it_fails(running)
        assert stream.opens == ["-1"]  # no link left waiting after event 9
    finally:
        await running.close()


async def test_a_reopen_onto_the_same_stream_goes_on_after_the_last_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = Stream(10, drops=1)
    running = receiver(monkeypatch, stream)
    try:
        assert await numbers(running) == list(range(10))
        stream.count = 12
        async with asyncio.timeout(30):
            got: list[int] = []
            while len(got) < 2:
                got += await numbers(running)
        assert got == [10, 11]
        assert stream.opens == ["-1", 9]
        assert stream.properties_reads == 1
    finally:
        await running.close()
