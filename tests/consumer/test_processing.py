"""Calling the user's handler: a sync handler's call ends only with its thread.

Real time, but short: nothing here waits for a timer, only for a thread the test releases.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from eventhub_balancer.consumer import contexts, processing

CONTEXT = contexts.BatchContext(
    partition="0",
    epoch=1,
    consumer="orders",
    pod="pod-a",
    first_sequence_number=0,
    last_sequence_number=0,
    size=1,
)


async def test_a_cancelled_sync_handler_call_ends_only_when_its_thread_does() -> None:
    started, finish = threading.Event(), threading.Event()
    finished: list[bool] = []

    def handler(events: object, context: object) -> None:
        started.set()
        finish.wait(timeout=30)  # a bound for the test only
        finished.append(True)

    call = asyncio.ensure_future(processing.PlainProcessor(handler)([], CONTEXT))
    assert await asyncio.to_thread(started.wait, 10)
    call.cancel()
    await asyncio.sleep(0.1)
    call.cancel()  # a second cancellation does not end it either
    await asyncio.sleep(0.1)
    # With asyncio.to_thread the call would be over by now, the thread still running.
    assert not call.done()
    finish.set()
    async with asyncio.timeout(10):
        with pytest.raises(asyncio.CancelledError):
            await call
    assert finished == [True]


async def test_a_sync_handler_call_returns_its_result_and_raises_its_error() -> None:
    def fails(events: object, context: object) -> None:
        raise ValueError("bad event")

    with pytest.raises(ValueError, match="bad event"):
        await processing.PlainProcessor(fails)([], CONTEXT)
    assert await processing.run_in_thread(lambda x: x + 1, 41) == 42
