"""A receiver's close ends its receive task even when the SDK drops the cancellation.

The SDK reads every AMQP frame under ``asyncio.wait_for``; in Python 3.11 that drops a
cancellation arriving in the same turn of the loop as the frame, and the receive task goes on
as if never cancelled. A released partition's close then waited until its link was stolen
(15 s in a benchmark, with the pod NotReady meanwhile). `linkrepairs.cancel_until_done` cancels
again while the task is still in the SDK's receiving. On fake loop time (looptime).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from eventhub_balancer.adapters import deliveries, linkrepairs, receiving

pytestmark = pytest.mark.looptime


class DropsCancellations:
    """An SDK client and consumer whose opening or receiving drops the first ``drops``
    cancellations, as a frame read under 3.11's ``wait_for`` does, and goes on."""

    def __init__(self, *, where: str, drops: int = 1) -> None:
        self.where = where
        self.drops = drops
        self.dropped = 0
        self.closed = 0
        self.receiving = False

    def _create_consumer(self, *args: Any, **kwargs: Any) -> DropsCancellations:
        return self

    async def _frames(self, *, here: str, forever: bool) -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
                if not forever:
                    return
            except asyncio.CancelledError:
                if self.where != here or self.dropped >= self.drops:
                    raise
                self.dropped += 1  # the frame came with the cancellation: it is dropped
                if not forever:
                    return

    async def _open(self) -> None:
        await self._frames(here="open", forever=False)

    async def receive(self, *args: Any) -> None:
        self.receiving = True
        await self._frames(here="receive", forever=True)

    async def close(self) -> None:
        self.closed += 1


def receiver_on(client: DropsCancellations, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(receiving, "make_client", lambda address: client)
    return receiving.PartitionReceiver(
        address=receiving.EventHubAddress("local.servicebus.windows.net", "orders"),
        partition="0",
        epoch=1,
        position=deliveries.ReceivePosition.after(5),
    )


@pytest.mark.parametrize("drops", [1, 3])
async def test_a_dropped_cancellation_while_receiving_is_repeated(
    monkeypatch: pytest.MonkeyPatch, drops: int
) -> None:
    client = DropsCancellations(where="receive", drops=drops)
    receiver = receiver_on(client, monkeypatch)
    receiver.start()
    await asyncio.sleep(0.1)
    assert client.receiving
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(60):
        await receiver.close()
    assert client.dropped == drops
    assert receiver._task is not None
    assert receiver._task.done()
    # One cancellation, then one more every RECANCEL_S for each one dropped.
    assert loop.time() - started <= (drops + 1) * linkrepairs.RECANCEL_S
    assert client.closed == 2  # the consumer and its client, each once


async def test_a_cancellation_dropped_while_opening_ends_before_receiving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = DropsCancellations(where="open")
    receiver = receiver_on(client, monkeypatch)
    receiver.start()
    await asyncio.sleep(0.005)  # in the middle of the handshake
    async with asyncio.timeout(60):
        await receiver.close()
    assert client.dropped == 1
    assert not client.receiving


async def test_a_task_that_never_ends_is_given_up_within_the_limit() -> None:
    done = asyncio.Event()

    async def stubborn() -> None:
        while not done.is_set():
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await linkrepairs.cancel_until_done(task, again=lambda: True, limit=2.0)
    assert loop.time() - started == pytest.approx(2.0)
    done.set()
    await task


async def test_cleanup_is_not_cut_short_by_cancelling_again() -> None:
    finished = []

    async def cleaning() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(asyncio.sleep(1.0))
            finished.append(True)

    task = asyncio.create_task(cleaning())
    await asyncio.sleep(0)
    assert await linkrepairs.cancel_until_done(task, again=lambda: False)
    assert finished == [True]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12's wait_for keeps cancellations")
async def test_this_python_drops_a_cancellation_that_comes_with_the_result() -> None:
    """The cause, on the interpreter the images run (3.11): ``wait_for`` returns the result
    and the task goes on."""
    loop = asyncio.get_running_loop()
    frame: asyncio.Future[str] = loop.create_future()
    went_on = []

    async def reading() -> None:
        await asyncio.wait_for(frame, timeout=10)
        went_on.append(True)

    task = asyncio.create_task(reading())
    await asyncio.sleep(0)
    frame.set_result("frame")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert went_on == [True]
    assert not task.cancelled()
