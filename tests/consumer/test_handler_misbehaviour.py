"""A handler written wrongly, against the runtime on fake time: each mistake is refused at
start or becomes a failed attempt under the failure policy, never a lost event, a checkpoint in
the wrong place, or a partition that stops or spins without a report.

The handlers are user code as ``ehb consume`` loads it: plain functions wrapped by
`processing.PlainProcessor`, not the test fakes' processors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer.consumer import (
    BatchContext,
    assignments,
    partitions,
    processing,
    runtime,
)
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

#: Retries 0.5 s, then 1 s apart, as the runtime's defaults start.
BATCH = partitions.BatchSettings(
    batch_size=10, max_wait=0.05, retry_backoff=0.5, retry_backoff_max=30.0
)


@contextlib.asynccontextmanager
async def running(
    hub: consumerfakes.FakeHub, store: consumerfakes.FakeStore, handler: Any
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a", batch=BATCH),
        source=source,
        backends=consumerfakes.fake_backends(hub, store.handle("pod-a")),
        processor=processing.PlainProcessor(handler),
        exit_process=_no_exit,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(10):
            await task


def _no_exit(reason: str) -> None:
    raise AssertionError(f"the runtime asked to exit: {reason}")


def checkpointed(store: consumerfakes.FakeStore, partition: str = "0") -> int | None:
    blob = store.blobs.get(partition)
    return None if blob is None else blob.sequence_number


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_a_handler_that_empties_its_batch_and_fails_gets_the_whole_batch_again(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """``while events: handle(events.pop(0))`` failing half-way used to leave the retry only
    the events after the failed one: the failed event was checkpointed past, never handled."""
    fake_hub.append("0", 5)
    handled: list[int] = []
    seen: list[list[int]] = []

    def process(events: Any, context: BatchContext) -> None:
        seen.append([e.sequence_number for e in events])
        while events:
            event = events.pop(0)
            if event.sequence_number == 2 and context.attempt == 1:
                raise RuntimeError("the database was away")
            handled.append(event.sequence_number)

    async with running(fake_hub, fake_store, process) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: checkpointed(fake_store) == 4)
    assert seen == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert sorted(set(handled)) == [0, 1, 2, 3, 4]


async def test_a_handler_that_sorts_its_batch_does_not_move_the_checkpoint(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Sorting the batch in place by key used to make the checkpoint name whichever event
    ended up last: a hand-off then started the next owner in the middle of the batch."""
    for key in "edcba":
        fake_hub.append("0", 1, key=key)

    def process(events: Any, context: BatchContext) -> None:
        events.sort(key=lambda e: e.partition_key)  # group by key before writing

    async with running(fake_hub, fake_store, process) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: checkpointed(fake_store) not in (None, -1))
        await asyncio.sleep(1)
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=2, released={"0": 1})
    assert fake_store.blobs["0"].sequence_number == 4
