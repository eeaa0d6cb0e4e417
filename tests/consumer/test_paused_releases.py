"""A process paused during a release (CPU throttling, a frozen container, a debugger) and
carried past the release timeout and the handler-exit grace, whose handler ends a moment
after the pause: it finished, so its batch is checkpointed and released, and the process
stays. Before, the deadlines fired at once when the loop ran again, ahead of the call's
result: the batch was abandoned (the next owner processed it again) and the process exited
with status 70, saying its handler "still runs 1 s past its release deadline" after it had
run for a few milliseconds.

Real time, not looptime: a pause is real time the loop lost, which fake time does not see.
The pause here is the loop blocked in ``time.sleep`` while the handler's thread waits for it
to end, so that both go on together, as after SIGCONT.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

import pytest

from eventhub_balancer.consumer import BatchContext, Event, partitions, processing
from tests.consumer.test_runtime import running
from tests.support import consumerfakes

BATCH = partitions.BatchSettings(
    batch_size=10, max_wait=0.05, release_timeout=1.0, handler_exit_timeout=1.0
)
PAUSE_S = BATCH.release_timeout + BATCH.handler_exit_timeout + 1.0


async def test_a_handler_ending_right_after_a_pause_past_its_deadlines_is_not_abandoned(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_hub.append("0", 4)
    started, resumed = threading.Event(), threading.Event()

    def process(events: Sequence[Event], context: BatchContext) -> None:
        started.set()
        resumed.wait(30)
        time.sleep(0.05)  # what was left of the call when the pause began

    exits: list[str] = []
    caplog.set_level(logging.WARNING)
    processor = processing.PlainProcessor(process)
    async with running(fake_hub, fake_store, processor, batch=BATCH, exits=exits) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(started.is_set)
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        await asyncio.sleep(0.2)  # the release has begun, its deadline 1 s away
        time.sleep(PAUSE_S)  # noqa: ASYNC251 - the pause: the loop does not turn
        resumed.set()
        async with asyncio.timeout(10):
            await source.wait_for(generation=2, released={"0": 1})
    assert exits == []
    assert fake_store.blobs["0"].sequence_number == 3  # the batch's final checkpoint
    assert not [r for r in caplog.records if "abandoned the batch" in r.getMessage()]


async def test_a_handler_still_running_after_the_pause_is_abandoned_and_the_process_exits(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The moment after the pause is short: a handler that really outlives its deadlines
    still ends the process, as `--handler-exit-seconds` says."""
    fake_hub.append("0", 4)
    started, finish = threading.Event(), threading.Event()

    def process(events: Sequence[Event], context: BatchContext) -> None:
        started.set()
        finish.wait(30)

    exits: list[str] = []
    processor = processing.PlainProcessor(process)
    try:
        async with running(fake_hub, fake_store, processor, batch=BATCH, exits=exits) as (
            _,
            source,
        ):
            source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
            await consumerfakes.eventually(started.is_set)
            source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
            await asyncio.sleep(0.2)
            time.sleep(PAUSE_S)  # noqa: ASYNC251 - the pause: the loop does not turn
            await consumerfakes.eventually(lambda: exits != [])
            finish.set()
    finally:
        finish.set()
    assert len(exits) == 1
    assert exits[0].startswith("partition 0: the handler still runs ")
    assert fake_store.blobs["0"].sequence_number == -1  # abandoned: nothing checkpointed
