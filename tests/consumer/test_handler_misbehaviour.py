"""A handler written wrongly, against the runtime on fake time: each mistake is refused at
start or becomes a failed attempt under the failure policy, never a lost event, a checkpoint in
the wrong place, or a partition that stops or spins without a report.

The handlers are user code as ``ehb consume`` loads it: plain functions wrapped by
`processing.PlainProcessor`, not the test fakes' processors.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

from eventhub_balancer.consumer import (
    BatchContext,
    Event,
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


def park_after(attempts: int) -> dict[str, str]:
    return {"processing": json.dumps({"maxAttempts": attempts, "onFailure": "park"})}


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


class Abort(BaseException):
    """What some libraries raise to unwind (gevent's ``GreenletExit``, trio's ``Cancelled``)."""


def raising(error: BaseException) -> Any:
    calls: list[float] = []

    async def process(events: Sequence[Event], context: BatchContext) -> None:
        calls.append(now())
        raise error

    process.calls = calls  # type: ignore[attr-defined]
    return process


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (asyncio.CancelledError(), "CancelledError: the handler raised it"),
        (Abort("unwound"), "Abort: unwound"),
        (SystemExit(3), "SystemExit: 3"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
    ],
    ids=["CancelledError", "BaseException", "SystemExit", "KeyboardInterrupt"],
)
async def test_a_handler_raising_a_base_exception_counts_failed_attempts_then_parks(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    error: BaseException,
    text: str,
) -> None:
    """A CancelledError nobody asked for used to end the worker as if the runtime had
    cancelled it: started again at once, in a loop without backoff or report; another
    BaseException crashed the worker past the failure policy; SystemExit and KeyboardInterrupt
    stopped the whole pod's event loop. Each is a failed attempt of its batch now."""
    fake_hub.append("0", 3)
    fake_hub.append("1", 3)
    process = raising(error)
    ok: list[int] = []

    async def by_partition(events: Sequence[Event], context: BatchContext) -> None:
        if context.partition == "0":
            await process(events, context)
        ok.extend(e.sequence_number for e in events)

    async with running(fake_hub, fake_store, by_partition) as (consumer, source):
        source.put(
            consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}, **park_after(3))
        )
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked",
            what="partition 0 parked",
        )
        gaps = [b - a for a, b in itertools.pairwise(process.calls)]
        assert gaps == [pytest.approx(0.5, abs=0.01), pytest.approx(1.0, abs=0.01)]
        assert source.reports["0"].attempts == 3
        assert source.reports["0"].error.startswith(text)
        assert consumer.stats["0"].handler_errors == 3
        assert fake_store.blobs["0"].sequence_number == -1
        assert fake_store.blobs["1"].sequence_number == 2
        assert ok == [0, 1, 2]
        assert consumer.ready()[0]


async def test_a_sync_handler_raising_system_exit_in_its_thread_is_a_failed_attempt(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 3)
    calls: list[int] = []

    def process(events: Sequence[Event], context: BatchContext) -> None:
        calls.append(context.attempt)
        sys.exit("no config for this tenant")

    async with running(fake_hub, fake_store, process) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **park_after(2)))
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked",
            what="partition 0 parked",
        )
        assert calls == [1, 2]
        assert source.reports["0"].error == "SystemExit: no config for this tenant"
        assert not consumer.stopped


def generator_handler(events: Sequence[Event], context: BatchContext) -> Iterator[None]:
    for event in events:
        HANDLED.append(event.sequence_number)
        yield


HANDLED: list[int] = []


async def test_a_handler_that_returns_a_generator_never_passes_the_checkpoint(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """A handler with a ``yield`` in it returns a generator and runs nothing: the batch used
    to be checkpointed unhandled. (``ehb consume`` refuses such a function at start:
    tests/consumer/test_protocols.py; here one that got past, as a callable object.)"""
    fake_hub.append("0", 3)
    HANDLED.clear()
    async with running(fake_hub, fake_store, generator_handler) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **park_after(1)))
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked",
            what="partition 0 parked",
        )
        assert source.reports["0"].error.startswith("TypeError: ")
        assert "generator" in source.reports["0"].error
    assert fake_store.blobs["0"].sequence_number == -1
    assert HANDLED == []


async def test_an_async_handler_that_returns_a_coroutine_has_it_awaited(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """``return write(events)`` with the ``await`` forgotten: the coroutine was dropped (never
    run) and the batch checkpointed as done. A sync handler's returned coroutine was already
    awaited; an async handler's is now too."""
    fake_hub.append("0", 3)
    written: list[int] = []

    async def write(events: Sequence[Event]) -> None:
        await asyncio.sleep(0.1)
        written.extend(e.sequence_number for e in events)

    async def process(events: Sequence[Event], context: BatchContext) -> Any:
        return write(events)

    async with running(fake_hub, fake_store, process) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: checkpointed(fake_store) == 2)
    assert written == [0, 1, 2]


async def test_a_value_returned_by_a_handler_is_ignored_with_one_warning(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``return False`` does not fail a batch (only raising does): the batch is checkpointed,
    as documented, and the log says so once instead of never."""
    fake_hub.append("0", 3)
    calls: list[int] = []

    def process(events: Sequence[Event], context: BatchContext) -> bool:
        calls.append(len(events))
        return False  # meant as "failed"

    async with running(fake_hub, fake_store, process) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: checkpointed(fake_store) == 2)
        fake_hub.append("0", 2)
        await consumerfakes.eventually(lambda: checkpointed(fake_store) == 4)
    assert calls == [3, 2]
    warnings = [r.getMessage() for r in caplog.records if "returned" in r.getMessage()]
    assert warnings == [
        "the handler returned False, which the runtime ignores: a batch is done when its "
        "handler returns, whatever it returns; raise to fail it (said once)"
    ]


def _read_amount(body: bytes) -> int:
    return int(json.loads(body)["amount"])


async def test_the_log_shows_where_in_the_handler_a_failing_batch_raised(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pod's log said ``KeyError('amount')`` and nothing more: no file, no line, no frame
    of the handler's own code. The first failure of a batch and the give-up carry the
    traceback; the retries between them stay one line each."""
    fake_hub.append("0", 3)

    def process(events: Sequence[Event], context: BatchContext) -> None:
        for event in events:
            _read_amount(event.body)

    caplog.set_level("WARNING", logger="eventhub_balancer.consumer.attempts")
    async with running(fake_hub, fake_store, process) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **park_after(3)))
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked",
            what="partition 0 parked",
        )
    failures = [r for r in caplog.records if "handler failed" in r.getMessage()]
    assert len(failures) == 3
    traced = [r for r in failures if r.exc_info is not None]
    assert traced == [failures[0], failures[2]]
    # Each line says the error as the status does, not as a repr (a Java exception's repr
    # named only the JVM object called).
    assert "(attempt 2 of 3): JSONDecodeError: Extra data" in failures[1].getMessage()
    for record in traced:
        text = caplog.handler.formatter.formatException(record.exc_info)  # type: ignore[union-attr,arg-type]
        assert "in _read_amount" in text
        assert text.splitlines()[-1].startswith("json.decoder.JSONDecodeError: Extra data")


async def test_a_parked_partition_reads_parked_not_failing_on_metrics(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """``ehb_consumer_partition_failing`` is "being retried": a parked partition retries
    nothing, and its report says ``parked`` alone. The gauge stayed 1 beside the parked one,
    so an alert on failing partitions fired for every parked one too."""
    from prometheus_client import generate_latest

    from eventhub_balancer.consumer import metrics

    fake_hub.append("0", 3)

    def process(events: Sequence[Event], context: BatchContext) -> None:
        raise ValueError("poison")

    async with running(fake_hub, fake_store, process) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **park_after(2)))
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked",
            what="partition 0 parked",
        )
        page = generate_latest(metrics.registry_for(lambda: consumer.stats)).decode()
        gauges = [line for line in page.splitlines() if line.startswith("ehb_consumer_partition")]
        assert gauges == [
            'ehb_consumer_partition_stuck{partition="0"} 0.0',
            'ehb_consumer_partition_failing{partition="0"} 0.0',
            'ehb_consumer_partition_parked{partition="0"} 1.0',
        ]
