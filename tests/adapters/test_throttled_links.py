"""A throttled Event Hubs (``com.microsoft:server-busy``) met by a partition's receiver, on
fake loop time (looptime).

Event Hubs throttles a namespace over its capacity by refusing receive links, and detaching
open ones, with ``com.microsoft:server-busy`` and ``Please wait 4 seconds and try again``.
The receiver reopened after 0.5, 1 and 2 s regardless: three more attaches on a service that
had asked for 4 s of quiet, from every partition of every pod at once. And a link detached
mid-stream that way ended "without an error" as far as the SDK told it (the SDK keeps the
detach's error on its link and returns), so the receiver did not even know it was throttled.
Now each reopen after a throttled link waits at least the time Event Hubs asks for, and the
events go on from the last one received, none lost, none twice. ``tests/adapters/wire/
test_throttled_links.py`` replays the same on the local emulator.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import types
from typing import Any

import pytest
from azure.eventhub._pyamqp import error as amqp

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, linkrefusals, receiving
from tests.support import sdkclients

pytestmark = pytest.mark.looptime

ADDRESS = receiving.EventHubAddress("shop.servicebus.windows.net", "orders")

#: Event Hubs' words for a throttled request, with its tracking tail.
BUSY = (
    "The request was terminated because the entity is being throttled. Error code : 50002. "
    "Please wait {wait} seconds and try again. To know more visit "
    "https://aka.ms/sbResourceMgrExceptions TrackingId:7a1f, SystemTracker:shop:eventhub:"
    "orders~32766|$default, Timestamp:2026-01-01T00:00:00"
)


def server_busy(wait: int = 4) -> amqp.AMQPLinkError:
    return amqp.AMQPLinkError(
        condition=b"com.microsoft:server-busy", description=BUSY.format(wait=wait).encode()
    )


class ThrottledPartition:
    """Events ``0 .. count-1``. Links opened before ``busy_until`` (loop time) are refused
    with server-busy; with ``detach_after`` events, the first link that opens delivers that
    many, then is detached with server-busy (the SDK returns from ``receive`` and keeps the
    error on its link), and Event Hubs throttles for ``busy_for`` seconds from then."""

    def __init__(
        self,
        *,
        count: int,
        busy_until: float = 0.0,
        detach_after: int | None = None,
        busy_for: float = 0.0,
        wait: int = 4,
    ) -> None:
        self.count = count
        self.busy_until = busy_until
        self.detach_after = detach_after
        self.busy_for = busy_for
        self.wait = wait
        #: Loop time of every link opening.
        self.opens: list[float] = []

    def client(self, address: object) -> ThrottledPartition:
        return self

    def _create_consumer(
        self, group: str, partition: str, position: Any, on_events: Any, **kwargs: Any
    ) -> Any:
        link = types.SimpleNamespace(_handler=None)
        loop = asyncio.get_running_loop()
        first = 0 if position == "-1" else int(position) + 1

        async def _open() -> None:
            self.opens.append(loop.time())
            if loop.time() < self.busy_until:
                raise server_busy(self.wait)

        async def receive(*args: object) -> None:
            last = self.count
            detach = self.detach_after is not None
            if detach:
                last, self.detach_after = min(self.count, first + (self.detach_after or 0)), None
            events = [sdkclients.sdk_event(n) for n in range(first, last)]
            if events:
                await on_events(events)
            if detach:
                await asyncio.sleep(1)
                self.busy_until = loop.time() + self.busy_for
                link._handler = types.SimpleNamespace(
                    _link=types.SimpleNamespace(_error=server_busy(self.wait))
                )
                return  # what the SDK does: the detach's error stays on its link
            await asyncio.sleep(3600)

        async def close() -> None:
            return None

        link._open, link.receive, link.close = _open, receive, close
        return link

    async def get_partition_properties(self, partition: str) -> dict[str, Any]:
        return {"last_enqueued_sequence_number": self.count - 1}

    async def close(self) -> None:
        return None


async def received(running: receiving.PartitionReceiver, *, count: int, within: float) -> list[int]:
    numbers: list[int] = []
    async with asyncio.timeout(within):
        while len(numbers) < count:
            batch = await running.next_batch(max_size=100, max_wait=0.1)
            numbers += [e.sequence_number for e in batch.events]
    return numbers


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in itertools.pairwise(times)]


async def receive_all(
    partition: ThrottledPartition, caplog: pytest.LogCaptureFixture, *, count: int
) -> tuple[list[int], list[str]]:
    """A receiver of partition 0 on ``partition``'s client until it has ``count`` events: the
    sequence numbers, and the receiver's warnings."""
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=3, position=deliveries.ReceivePosition.earliest()
    )
    running.start()
    try:
        with caplog.at_level(logging.WARNING, logger=receiving.__name__):
            numbers = await received(running, count=count, within=60)
    finally:
        await running.close()
    return numbers, [r.getMessage() for r in caplog.records]


async def test_a_refused_link_is_reopened_no_sooner_than_event_hubs_asks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    partition = ThrottledPartition(count=5, busy_until=10.0)
    monkeypatch.setattr(receiving, "make_client", partition.client)
    numbers, warnings = await receive_all(partition, caplog, count=5)
    assert numbers == [0, 1, 2, 3, 4]
    assert len(partition.opens) >= 2
    assert min(gaps(partition.opens)) >= 4.0, partition.opens  # it was 0.5, 1, 2, 4, 8
    assert partition.opens[-1] < 10.0 + 8.0 * 1.25  # bounded: no pause past 8 s and its jitter
    assert warnings
    assert all("throttled" in w and "server-busy" in w for w in warnings), warnings


async def test_a_link_detached_as_throttled_mid_stream_waits_and_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    partition = ThrottledPartition(count=10, detach_after=5, busy_for=3.0, wait=6)
    monkeypatch.setattr(receiving, "make_client", partition.client)
    numbers, warnings = await receive_all(partition, caplog, count=10)
    assert numbers == list(range(10))  # none lost, none twice
    detached_at = partition.opens[0] + 1.0
    assert partition.opens[1] - detached_at >= 6.0  # the service asked for 6 s; it was 0.5
    assert len(warnings) == 1, warnings
    assert "server-busy" in warnings[0]


async def test_a_throttling_that_lasts_fails_the_partition_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    partition = ThrottledPartition(count=5, busy_until=3600.0)
    monkeypatch.setattr(receiving, "make_client", partition.client)
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=3, position=deliveries.ReceivePosition.earliest()
    )
    running.start()
    try:
        with pytest.raises(errors.EventHubUnreachable) as raised:
            await received(running, count=1, within=120)
    finally:
        await running.close()
    assert len(partition.opens) == receiving.REOPEN_ATTEMPTS
    assert str(raised.value) == (
        "partition 0: Event Hubs throttled the receive link 6 times in a row "
        "(com.microsoft:server-busy): The request was terminated because the entity is being "
        "throttled. Error code : 50002. Please wait 4 seconds and try again."
    )


@pytest.mark.parametrize(
    ("error", "wait"),
    [
        (server_busy(4), 4.0),
        (server_busy(11), 11.0),
        (amqp.AMQPLinkError(condition=b"com.microsoft:server-busy", description=b"busy"), 4.0),
        (amqp.AMQPLinkError(condition=amqp.ErrorCondition.LinkStolen.value), None),
        (ConnectionResetError("reset by peer"), None),
    ],
    ids=["4s", "11s", "no-hint", "stolen", "reset"],
)
def test_how_long_event_hubs_asks_to_wait(error: BaseException, wait: float | None) -> None:
    assert linkrefusals.throttled(error) == wait


class StolenPartition(ThrottledPartition):
    """A partition whose link is stolen as soon as it opens: a receiver with a higher epoch
    took it (Event Hubs' detach names no epoch)."""

    def _create_consumer(
        self, group: str, partition: str, position: Any, on_events: Any, **kwargs: Any
    ) -> Any:
        link = super()._create_consumer(group, partition, position, on_events, **kwargs)

        async def receive(*args: object) -> None:
            raise amqp.AMQPLinkError(
                condition=amqp.ErrorCondition.LinkStolen,
                description=b"New receiver with higher epoch of '4' is created",
            )

        link.receive = receive
        return link


async def test_a_stolen_link_says_a_higher_epoch_took_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "ownership lost, epoch 3 by a newer receiver supersedes our epoch 3", a tie
    that supersedes nothing: the thief's epoch is not known here."""
    partition = StolenPartition(count=5)
    monkeypatch.setattr(receiving, "make_client", partition.client)
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=3, position=deliveries.ReceivePosition.earliest()
    )
    running.start()
    try:
        with pytest.raises(errors.OwnershipLost) as lost:
            await received(running, count=1, within=60)
    finally:
        await running.close()
    assert str(lost.value) == (
        "partition 0: ownership lost, a higher epoch by a newer receiver supersedes our epoch 3"
    )
    assert (lost.value.our_epoch, lost.value.their_epoch) == (3, None)
