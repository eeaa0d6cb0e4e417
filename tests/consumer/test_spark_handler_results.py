"""A Spark handler's call that ran nothing is a failed trigger, not events done.

A callable object whose ``__call__`` is ``async def`` passed the start's check (the object
is not a coroutine function) and returned a coroutine that nobody awaited: the trigger
"succeeded" and its batches were checkpointed unprocessed. So is one that returns a
generator (a ``yield`` in it). Plain mode fails such a batch (`processing.PlainProcessor`);
Spark mode now does too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from eventhub_balancer.consumer import contexts
from tests.consumer.test_triggers import Handler, batch, spark_triggers

pytestmark = pytest.mark.looptime


class AsyncCall:
    def __init__(self) -> None:
        self.ran = False

    async def __call__(self, df: Any, context: contexts.TriggerContext) -> None:
        self.ran = True


class YieldingCall:
    def __call__(self, df: Any, context: contexts.TriggerContext) -> Iterator[None]:
        yield None


@pytest.mark.parametrize("handler", [AsyncCall(), YieldingCall()], ids=["async", "yield"])
async def test_a_handler_call_that_ran_nothing_fails_its_batch(handler: Any) -> None:
    processor = spark_triggers(Handler())
    processor.function = handler
    events, context = batch("0", 0, 3)
    with pytest.raises(TypeError, match="ran nothing"):
        await asyncio.wait_for(processor(events, context), timeout=10)
    assert processor.stats.succeeded == 0
