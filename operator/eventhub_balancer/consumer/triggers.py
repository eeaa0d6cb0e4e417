"""Spark mode: one handler call per trigger, over every partition the pod runs.

A Spark job has a fixed cost (a few hundred milliseconds even for a small DataFrame), so one
job per partition per micro-batch caps a pod's throughput. Here the partitions' workers still
cut their own batches, fence, checkpoint and release exactly as in plain mode
(`partitions.PartitionWorker`), but their handler calls meet in a queue: each trigger takes
the batches that are waiting, makes one DataFrame of them, and calls ``process(df, context)``
once. Every batch in the trigger is done when the call returns; each partition's worker then
checkpoints its own batch. So:

- a checkpoint passes a batch only after the trigger that held it returned;
- a release waits for the trigger in flight, as it waits for any handler call: planned moves
  make no duplicates. A batch whose trigger's handler has not started yet (queued, or
  waiting with its trigger for the session) is withdrawn, unprocessed, as soon as its
  partition's release starts (`processing.release_started`) or its call is cancelled (the
  release's deadline, a shutdown): the next owner processes it, and the release waits for
  no trigger that does not hold its batch;
- a failing trigger follows the failure policy per partition when the failing partition can be
  told: the handler raised `partitionfailures.PartitionsFailed` naming it, or the trigger held
  one partition only. A trigger over several partitions that failed otherwise is retried with
  each of its partitions alone, which tells them apart; only a partition that fails alone
  counts an attempt.

Triggers follow Structured Streaming's processing-time triggers: one starts at most every
``interval`` seconds (0: as soon as the previous one ended and a batch waits), and takes
whole batches, oldest first, up to ``max_events`` (at least one batch). Before it starts, it
waits a moment (`GATHER_S` at most) for the partitions of the previous trigger to hand in
their next batch: they do so only once their checkpoint is written, and a trigger that left
them behind would make the next one small, then the next one without them, and so on: a
pod's partitions would split into two half-size triggers for good. With no previous trigger
to go by (the first one, or the one after a failure), it waits instead until the batches
stop coming (`SETTLE_S` without a new one, `GATHER_S` at most): the partitions' first
batches, cut at the same time, come within a few milliseconds of each other, and the first
of them alone would otherwise make a trigger of its own, paying a job's fixed cost for one
batch while the others wait.

While a trigger runs, the interpreter hands the GIL over more often
(`switchintervals.prompt_gil`): the handler thread's py4j round trips need it back.

The SparkSession may still be starting when the first batches arrive (the pod is NotReady
until it is warm, but a pod restarted in its grace period still holds partitions): the first
trigger waits for it, its batches still in the queue (so still withdrawable). A trigger that
fails because the session is gone (``session_lost``, see `sessionkeeping`) hands its batches
to the next trigger, on the new session, without counting a failed attempt: a JVM can die of
something else. A batch whose trigger loses the session again (its JVM killed out of memory
by what the handler does with it, say) fails that trigger as an unnamed failure does: counted
when alone, else retried alone (`triggerqueue.SessionLostAgain`). Before, such a batch killed
every new session, for ever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.consumer import (
    contexts,
    metrics,
    processing,
    switchintervals,
    triggerqueue,
)
from eventhub_balancer.spark import frames

logger = logging.getLogger(__name__)

#: The longest wait for the previous trigger's partitions before a trigger starts without them
#: (a partition whose events ran out costs it once).
GATHER_S = 0.25
#: With no previous trigger to go by, a trigger starts once no batch came for this long.
SETTLE_S = 0.1


@dataclasses.dataclass(frozen=True, kw_only=True)
class TriggerSettings:
    """How the pod's batches are gathered into Spark triggers."""

    #: Seconds from one trigger's start to the next one's; 0: back to back.
    interval: float = 0.0
    #: The most events one trigger takes (whole batches; a bigger batch still goes alone).
    max_events: int = 20_000

    def __post_init__(self) -> None:
        if self.interval < 0:
            raise errors.InvalidInput("--trigger-interval", f"{self.interval} is negative")
        if self.max_events < 1:
            raise errors.InvalidInput(
                "--max-events-per-trigger", f"{self.max_events} is less than 1"
            )


class SparkTriggers:
    """A `processing.BatchProcessor` that runs the pod's batches in shared Spark triggers."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        session: Callable[[], Awaitable[Any]],
        consumer: str,
        pod: str,
        settings: TriggerSettings = TriggerSettings(),
        executor: concurrent.futures.Executor | None = None,
        stats: metrics.TriggerStats | None = None,
        session_lost: Callable[[Any, BaseException], Awaitable[bool]] | None = None,
    ) -> None:
        if inspect.iscoroutinefunction(function):
            raise errors.InvalidInput(
                "--handler", "a Spark handler must be a plain function (Spark calls block)"
            )
        self.function = function
        #: Returns the SparkSession once it has started (raises why it cannot).
        self.session = session
        #: The `frames.ArrowLoader` of the session triggers last ran on (None: not a classic
        #: session), made on the handler's thread at its first trigger.
        self._loader: frames.ArrowLoader | None = None
        self._loader_session: Any = None
        #: Asked after a failed trigger whether its session was lost (and is being replaced).
        self.session_lost = session_lost
        self.consumer = consumer
        self.pod = pod
        self.settings = settings
        self.executor = executor
        #: The number of the last trigger handed to the handler.
        self.batch_id = 0
        #: Triggers that returned and that raised, their events and their time (/metrics).
        self.stats = stats or metrics.TriggerStats()
        self._queue: list[triggerqueue.QueuedBatch] = []
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._last_start: float | None = None
        #: The partitions of the last trigger that succeeded, and when it ended (loop time):
        #: the next one waits a moment for them.
        self._recent: set[str] = set()
        self._last_end = 0.0
        #: When the last batch was handed in (loop time).
        self._last_queued = 0.0
        #: {partition: first sequence number} of the batches whose trigger lost its session
        #: (forgotten once a trigger of the partition returns): a second loss counts.
        self._lost: dict[str, int] = {}

    # -- the workers' side

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        """Returns when a trigger that held the batch returned; raises what failed it.

        Until its trigger's handler starts, the batch is withdrawn at once (the call raises
        CancelledError, the batch unprocessed) when the call is cancelled or when its
        partition's release starts (`processing.release_started`). Once the handler runs, a
        release lets it finish (the batch is done and checkpointed), and a cancelled call ends
        only when the trigger's thread does (like `processing.run_in_thread`): a release never
        overlaps a running trigger.
        """
        loop = asyncio.get_running_loop()
        release = processing.release_started.get()
        self._last_queued = loop.time()
        batch = triggerqueue.QueuedBatch(events, context, loop.create_future(), self._last_queued)
        self._queue.append(batch)
        self._wake.set()
        self._ensure_loop()
        cancelled = False
        # A batch handed to a later trigger (`triggerqueue.requeue`, `fail`) gets a new future: the
        # loop then waits for that one.
        while not batch.future.done():
            releasing = release is not None and release.is_set()
            if not batch.running and (cancelled or releasing):
                triggerqueue.withdraw(
                    self._queue, batch, "its call was cancelled" if cancelled else "its release"
                )
                raise asyncio.CancelledError()
            try:
                await triggerqueue.until_done(batch.future, None if releasing else release)
            except asyncio.CancelledError:
                cancelled = True  # not running: withdrawn above; running: wait for its thread
        if cancelled:
            raise asyncio.CancelledError()
        batch.future.result()  # what failed it, or CancelledError when the trigger was

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run_triggers(), name="spark-triggers")

    # -- the triggers

    async def _run_triggers(self) -> None:
        """Trigger after trigger while batches wait; ends when none does (restarted by the
        next batch)."""
        while self._queue:
            await self._wait_for_interval()
            await self._gather()
            if not self._queue:
                break  # all withdrawn meanwhile
            # The session first, the batches after: while it starts (the first one, or a new
            # one after a loss) they stay queued, and a release withdraws them.
            try:
                session = await self.session()
            except Exception as e:
                # No Spark: every waiting batch fails (and is retried by its worker, never lost).
                for batch in self._queue:
                    if not batch.future.done():
                        batch.future.set_exception(e)
                self._queue.clear()
                return
            taken = triggerqueue.take(self._queue, self.settings.max_events)
            if taken:
                await self._trigger(session, taken)

    async def _wait_for_interval(self) -> None:
        """Until ``interval`` after the last trigger's start, or until a full trigger waits."""
        if self._last_start is None or self.settings.interval <= 0:
            return
        due = self._last_start + self.settings.interval
        loop = asyncio.get_running_loop()
        while self._queue and loop.time() < due and not self._full():
            self._wake.clear()
            try:
                async with asyncio.timeout_at(due):
                    await self._wake.wait()
            except TimeoutError:
                return

    async def _gather(self) -> None:
        """Until every partition of the last trigger waits again (at most `GATHER_S` after that
        trigger ended), or a full trigger waits; with no last trigger to go by, `_settle`."""
        if not self._recent:
            await self._settle()
            return
        deadline = self._last_end + GATHER_S
        while not self._full() and self._recent - {b.partition for b in self._queue}:
            self._wake.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._wake.wait()
            except TimeoutError:
                return

    async def _settle(self) -> None:
        """Until no batch was handed in for `SETTLE_S` (at most `GATHER_S` after the oldest
        waiting one was), or a full trigger waits."""
        if not self._queue:
            return
        deadline = self._queue[0].queued_at + GATHER_S
        while not self._full():
            self._wake.clear()
            try:
                async with asyncio.timeout_at(min(deadline, self._last_queued + SETTLE_S)):
                    await self._wake.wait()
            except TimeoutError:
                return

    def _full(self) -> bool:
        return sum(len(b.events) for b in self._queue) >= self.settings.max_events

    async def _trigger(self, session: Any, taken: list[triggerqueue.QueuedBatch]) -> None:
        loop = asyncio.get_running_loop()
        self._last_start = loop.time()
        self.batch_id += 1
        ranges = {
            b.partition: contexts.PartitionRange(
                partition=b.partition,
                epoch=b.context.epoch,
                first_sequence_number=b.context.first_sequence_number,
                last_sequence_number=b.context.last_sequence_number,
                size=b.context.size,
            )
            for b in taken
        }
        context = contexts.TriggerContext(
            batch_id=self.batch_id,
            consumer=self.consumer,
            pod=self.pod,
            partitions=ranges,
            size=sum(r.size for r in ranges.values()),
            spark=session,
            attempt=max(b.context.attempt + b.retries for b in taken),
        )
        events = [e for b in taken for e in b.events]
        logger.debug(
            "trigger %d: %d events from partitions %s", self.batch_id, len(events), sorted(ranges)
        )
        began = time.monotonic()
        # From here on the handler may be writing the batches' output: none is withdrawn
        # until it returned (nothing between `triggerqueue.take` and here awaits).
        for batch in taken:
            batch.running = True
        try:
            with switchintervals.prompt_gil():
                await processing.run_in_thread(
                    self._call, session, events, context, executor=self.executor
                )
        except asyncio.CancelledError:
            for batch in taken:
                batch.future.cancel()
            raise
        except Exception as e:
            self._timed(began)
            self.stats.failed += 1
            self._recent = set()
            # Nothing of them is done: while the session's liveness check runs, a release
            # withdraws them (`triggerqueue.requeue` and `fail` skip a withdrawn one).
            for batch in taken:
                batch.running = False
            if self.session_lost is not None and await self.session_lost(session, e):
                firsts = {b.partition: b.context.first_sequence_number for b in taken}
                again = any(self._lost.get(p) == first for p, first in firsts.items())
                self._lost.update(firsts)
                if not again:
                    triggerqueue.requeue(self._queue, taken)
                    return
                e = triggerqueue.SessionLostAgain(e)
            triggerqueue.fail(self._queue, taken, e, self.batch_id)
            return
        self._timed(began)
        self.stats.succeeded += 1
        for batch in taken:
            batch.running = False
        self.stats.events += len(events)
        self._recent, self._last_end = set(ranges), loop.time()
        for partition in ranges:
            self._lost.pop(partition, None)
        for batch in taken:
            if not batch.future.done():
                batch.future.set_result(None)

    def _timed(self, began: float) -> None:
        self.stats.last_seconds = time.monotonic() - began
        self.stats.seconds += self.stats.last_seconds

    def _call(self, session: Any, events: Sequence[Any], context: contexts.TriggerContext) -> None:
        if self._loader_session is not session:
            # A new session (the first, or one that replaced a lost one): its own loader.
            self._loader, self._loader_session = frames.arrow_loader(session), session
        df = frames.to_dataframe(
            session,
            events,
            batch_id=context.batch_id,
            ranges=context.partitions,
            loader=self._loader,
        )
        result = self.function(df, context)
        if inspect.isawaitable(result) or inspect.isgenerator(result):
            # An object whose ``__call__`` is ``async def`` passes the start's check, and a
            # ``yield`` makes a generator: either ran nothing, and returning would
            # checkpoint the trigger's events unprocessed.
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError(
                f"the Spark handler returned a {type(result).__name__} and ran nothing: a "
                "Spark handler is a plain function that does its work when called"
            )
