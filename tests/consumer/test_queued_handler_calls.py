"""A revoked partition whose batch waits for a handler thread is released at once.

With more partitions than ``--handler-concurrency`` threads, a backlog keeps every thread
busy and each partition's next batch waits in the pool's queue. The pool never started the
handler on that batch, so nothing has to finish before the release: the batch goes to the
next owner untouched. It used to stay queued: the release waited for a thread to free up,
then ran the whole batch, and past ``--release-timeout`` plus ``--handler-exit-seconds`` the
pod process exited, taking every other partition's batch in flight with it.

Real time, but short: nothing waits for a timer, only for threads the test releases.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
from collections.abc import Sequence

from eventhub_balancer.consumer import contexts, partitions, processing
from tests.consumer.test_runtime import running
from tests.support import consumerfakes

#: Release timeout and exit grace far above the test's real-time bound: only the queue
#: decides when partition 1 is released.
SETTINGS = partitions.BatchSettings(
    batch_size=5, max_wait=0.05, release_timeout=60, handler_exit_timeout=60
)


class Handler:
    """Partition 0's handler holds the pod's only thread until the test lets it go."""

    def __init__(self) -> None:
        self.busy = threading.Event()
        self.finish = threading.Event()
        self.calls: list[tuple[str, int]] = []

    def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        self.calls.append((context.partition, context.first_sequence_number))
        if context.partition == "0":
            self.busy.set()
            self.finish.wait(timeout=30)  # a bound for the test only


async def test_a_batch_waiting_for_a_thread_is_withdrawn_by_its_release(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    handler = Handler()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    processor = processing.PlainProcessor(handler, executor=pool)
    exits: list[str] = []
    try:
        async with running(
            fake_hub, fake_store, processor, batch=SETTINGS, shutdown_timeout=5, exits=exits
        ) as (_, source):
            source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
            assert await asyncio.to_thread(handler.busy.wait, 10)
            fake_hub.append("1", 5)  # its batch waits for the only thread
            await consumerfakes.eventually(
                lambda: pool._work_queue.qsize() == 1,
                what="partition 1's batch queued for a thread",
            )
            source.put(consumerfakes.configmap(2, {"0": (1, "owned"), "1": (1, "revoking")}))
            await consumerfakes.eventually(
                lambda: source.released.get("1") == 1, within=3, what="partition 1 released"
            )
            assert not handler.finish.is_set()  # partition 0's handler still holds the thread
            assert fake_store.blobs["1"].sequence_number == -1  # its batch went on untouched
            handler.finish.set()
            await asyncio.sleep(0.2)
            assert ("1", 0) not in handler.calls
        assert exits == []
    finally:
        handler.finish.set()
        pool.shutdown(wait=True)


async def test_a_batch_waiting_for_a_thread_is_not_reported_stuck(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The stuck limit is about a handler call that runs too long: a batch that waits for a
    thread has no call running, and reporting it stuck raised PartitionStuck on every
    partition of a pod whose handler threads a backlog keeps busy."""
    fake_hub.append("0", 5)
    handler = Handler()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    processor = processing.PlainProcessor(handler, executor=pool)
    settings = dataclasses.replace(SETTINGS, stuck_seconds=0.3)
    try:
        async with running(fake_hub, fake_store, processor, batch=settings, shutdown_timeout=5) as (
            consumer,
            source,
        ):
            source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
            assert await asyncio.to_thread(handler.busy.wait, 10)
            fake_hub.append("1", 5)
            await consumerfakes.eventually(
                lambda: pool._work_queue.qsize() == 1,
                what="partition 1's batch queued for a thread",
            )
            await asyncio.sleep(0.6)  # past the stuck limit, twice over
            stuck = {p for p, w in consumer.workers.items() if w.stuck()}
            assert stuck == {"0"}
            handler.finish.set()
            await consumerfakes.eventually(
                lambda: fake_store.blobs["1"].sequence_number == 4, what="partition 1 handled"
            )
    finally:
        handler.finish.set()
        pool.shutdown(wait=True)
