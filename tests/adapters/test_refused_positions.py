"""A receive position that Event Hubs refuses, on fake loop time (looptime).

Event Hubs refuses a receive link whose sequence number is past the partition's last event
(``com.microsoft:argument-error``: ``The supplied sequence number '12' is invalid. The last
sequence number in the system is '4'``). Reopening the link at the same position cannot mend
that, yet the receiver reopened it six times, over 15 s of WARNING lines, before it gave the
partition up with the SDK's text. Now the receiver ends at once with the service's words, and
the worker's restart (whose take-up moves a checkpoint past the end back) takes over.
"""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import pytest
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub._pyamqp import error as amqp

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, linkrefusals, receiving
from tests.support import sdkclients

pytestmark = pytest.mark.looptime

ADDRESS = receiving.EventHubAddress("shop.servicebus.windows.net", "orders")

#: Event Hubs' words for a sequence number past the end, with its tracking tail.
PAST_THE_END = (
    "The supplied sequence number '12' is invalid. The last sequence number in the system is "
    "'4' TrackingId:7a1f, SystemTracker:shop:eventhub:orders~32766|$default, Timestamp:2026-01-01"
)


async def nothing_until_it_fails(running: receiving.PartitionReceiver, *, within: float) -> None:
    async with asyncio.timeout(within):
        while True:
            assert (await running.next_batch(max_size=10, max_wait=0.1)).events == []


async def test_a_refused_position_ends_the_receiver_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    partition = sdkclients.FakePartition(count=5)
    monkeypatch.setattr(receiving, "make_client", sdkclients.FakeEventHub({"0": partition}).client)
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=3, position=deliveries.ReceivePosition.after(12)
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    running.start()
    try:
        with (
            caplog.at_level(logging.WARNING, logger=receiving.__name__),
            pytest.raises(errors.EventHubUnreachable) as raised,
        ):
            await nothing_until_it_fails(running, within=60)
    finally:
        await running.close()
    assert loop.time() - started < 1.0
    assert len(partition.opens) == 1  # never reopened
    assert str(raised.value) == (
        "partition 0: Event Hubs refused the receive position: "
        "The supplied sequence number '12' is invalid. The last sequence number in the system "
        "is '4'"
    )
    assert [r.getMessage() for r in caplog.records] == []


@pytest.mark.parametrize(
    "condition",
    [b"com.microsoft:argument-error", b"com.microsoft:argument-out-of-range"],
    ids=["argument-error", "argument-out-of-range"],
)
def test_both_argument_conditions_are_refused_positions(condition: bytes) -> None:
    error = amqp.AMQPLinkError(condition=condition, description=PAST_THE_END.encode())
    assert linkrefusals.position_refused(error) == (
        "The supplied sequence number '12' is invalid. The last sequence number in the system "
        "is '4'"
    )
    wrapped = eh_exceptions.ConnectionLostError(str(error), error)  # type: ignore[arg-type]
    assert linkrefusals.position_refused(wrapped) == linkrefusals.position_refused(error)


def test_other_refusals_are_not_refused_positions() -> None:
    stolen = amqp.AMQPLinkError(
        condition=amqp.ErrorCondition.LinkStolen.value, description=b"a higher epoch is open"
    )
    not_found = amqp.AMQPLinkError(
        condition=amqp.ErrorCondition.NotFound.value, description=b"could not be found"
    )
    for error in (stolen, not_found, ConnectionResetError("reset by peer")):
        assert linkrefusals.position_refused(error) is None


class ReconnectRefused:
    """Partition 0 delivers events ``0 .. 9`` on its first link, whose SDK reconnect (by the
    last event's offset) is then refused; afterwards the partition holds ``count`` events."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.opens: list[object] = []

    def client(self, address: object) -> ReconnectRefused:
        return self

    def _create_consumer(
        self, group: str, partition: str, position: object, on_events: Any, **kwargs: Any
    ) -> Any:
        link = types.SimpleNamespace(position=position, on_events=on_events)

        async def _open() -> None:
            self.opens.append(position)

        async def receive(*args: object) -> None:
            first = 0 if position == "-1" else int(position) + 1  # type: ignore[call-overload]
            events = [sdkclients.sdk_event(n) for n in range(first, self.count if first else 10)]
            if events:
                await on_events(events)
            if position == "-1":
                await asyncio.sleep(1)
                raise amqp.AMQPLinkError(
                    condition=b"com.microsoft:argument-error",
                    description=b"The supplied offset '90' is invalid. The last offset in the "
                    b"system is '20' TrackingId:7a1f",
                )
            await asyncio.sleep(3600)

        async def close() -> None:
            return None

        link._open, link.receive, link.close = _open, receive, close
        return link

    async def get_partition_properties(self, partition: str) -> dict[str, Any]:
        return {"last_enqueued_sequence_number": self.count - 1}

    async def close(self) -> None:
        return None


async def batches_until(running: receiving.PartitionReceiver, count: int) -> list[int]:
    got: list[int] = []
    async with asyncio.timeout(60):
        while len(got) < count:
            batch = await running.next_batch(max_size=100, max_wait=0.1)
            got += [e.sequence_number for e in batch.events]
    return got


async def test_a_refused_reconnect_onto_a_replaced_stream_says_it_was_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's own reconnect after events, refused: the stream may have been replaced (here
    it was, its last event is 2), and the receiver's stream check says so, not the offset."""
    hub = ReconnectRefused(count=3)
    monkeypatch.setattr(receiving, "make_client", hub.client)
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=3, position=deliveries.ReceivePosition.earliest()
    )
    running.start()
    try:
        assert await batches_until(running, 10) == list(range(10))
        with pytest.raises(errors.EventHubUnreachable, match="stream was replaced"):
            await nothing_until_it_fails(running, within=60)
    finally:
        await running.close()
    assert hub.opens == ["-1"]


async def test_a_refused_reconnect_onto_the_same_stream_goes_on_after_the_last_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = ReconnectRefused(count=12)
    monkeypatch.setattr(receiving, "make_client", hub.client)
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=3, position=deliveries.ReceivePosition.earliest()
    )
    running.start()
    try:
        assert await batches_until(running, 12) == list(range(12))
    finally:
        await running.close()
    assert hub.opens == ["-1", 9]
