"""A pod whose event loop stalls says so: an ``async def`` handler that blocks (the most
common cause) and a paused process both stop the probes' answers, and past podGraceSeconds
the pod's partitions move. Before, the pod's log said nothing of it: the user saw partitions
go back and forth (replayed on the local stack: an async handler sleeping 4 s per batch lost
its partitions after 40 s and got them back 8 s later, with duplicates, and not one line
about the loop).

Real time, not looptime: a stall is real time the loop lost, which fake time does not see.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import pytest

from eventhub_balancer.consumer import BatchContext, Event, loopstalls, processing
from tests.consumer.test_handler_misbehaviour import checkpointed, running
from tests.support import consumerfakes

BLOCK_S = loopstalls.STALL_S + 0.5


def stall_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "event loop did not turn" in r.getMessage()
    ]


async def test_an_async_handler_that_blocks_is_named_in_one_warning(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_hub.append("0", 2)

    async def process(events: Sequence[Event], context: BatchContext) -> None:
        time.sleep(BLOCK_S)  # noqa: ASYNC251 - the mistake under test: blocking in async def

    caplog.set_level(logging.WARNING)
    async with running(fake_hub, fake_store, process) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: checkpointed(fake_store) == 1)
        fake_hub.append("0", 1)  # a second stall within the minute: counted, not said
        await consumerfakes.eventually(lambda: checkpointed(fake_store) == 2)
    said = stall_warnings(caplog)
    assert len(said) == 1, said
    assert said[0].startswith("the event loop did not turn for ")
    assert "the handler is async" in said[0]
    assert "make the handler a plain def" in said[0]
    assert "podGraceSeconds" in said[0]


async def test_a_plain_handler_that_takes_long_stalls_nothing(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_hub.append("0", 2)

    def process(events: Sequence[Event], context: BatchContext) -> None:
        time.sleep(BLOCK_S)  # in its thread: the loop turns on

    caplog.set_level(logging.WARNING)
    async with running(fake_hub, fake_store, process) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: checkpointed(fake_store) == 1)
    assert stall_warnings(caplog) == []


def test_stalls_within_a_minute_are_counted_into_the_next_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stalls = loopstalls.LoopStalls(async_handler=False)
    caplog.set_level(logging.WARNING)
    stalls.observed(4.0, now=100.0)
    for at in (110.0, 120.0, 130.0):
        stalls.observed(3.0 + at / 100, now=at)
    assert len(stall_warnings(caplog)) == 1
    stalls.observed(2.5, now=160.0)
    said = stall_warnings(caplog)
    assert len(said) == 2
    assert said[1].startswith(
        "the event loop did not turn for 2.5 s (4 stalls since the last warning, the longest 4.3 s)"
    )
    assert "give the container more CPU" in said[1]
    assert (stalls.count, stalls.longest) == (5, 4.3)


def test_one_stall_since_the_last_warning_is_one_stall(caplog: pytest.LogCaptureFixture) -> None:
    """A stall more than a minute after the last warning read "(1 stalls since ...)"."""
    stalls = loopstalls.LoopStalls(async_handler=False)
    caplog.set_level(logging.WARNING)
    stalls.observed(4.0, now=100.0)
    stalls.observed(2.5, now=200.0)
    said = stall_warnings(caplog)
    assert said[1].startswith(
        "the event loop did not turn for 2.5 s (1 stall since the last warning, the longest 2.5 s)"
    )


def test_the_handler_kind_is_seen_through_tracing() -> None:
    async def asynchronous(events: Sequence[Event], context: BatchContext) -> None: ...

    def plain(events: Sequence[Event], context: BatchContext) -> None: ...

    class Wrapped:
        def __init__(self, inner: object) -> None:
            self.inner = inner

    assert loopstalls.handler_is_async(Wrapped(processing.PlainProcessor(asynchronous)))
    assert not loopstalls.handler_is_async(Wrapped(processing.PlainProcessor(plain)))
