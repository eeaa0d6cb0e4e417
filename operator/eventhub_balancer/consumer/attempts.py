"""One batch through the user's handler, under the failure policy.

A partition's worker (`partitions.PartitionWorker`) hands each micro-batch to its
`BatchAttempts`, which calls the handler until the batch is done, and says whether the
checkpoint may pass it:

- a handler error (anything it raises that is not the runtime's own cancellation:
  `processing.HandlerRaised`) is retried on the same batch, each call with a list of its
  own, with exponential backoff, never skipped;
  after the assignment's ``processing.maxAttempts`` the batch is parked (the partition stops
  at its checkpoint, before the batch, until the release) or dead-lettered (written beside
  the checkpoints; only once that write is durable may the checkpoint pass the batch);
- a release abandons the batch: a processor that has not started the handler on it yet may
  withdraw it as soon as the release starts (`processing.release_started`); past the release
  deadline the handler call is cancelled (`processing.abandon`), and
  a call that does not end (a sync handler's thread cannot be stopped) holds the release
  back, so the next owner never overlaps it; past ``handler_exit_timeout`` more, ``on_hung``
  is called (the runtime exits the process);
- what is wrong meanwhile (failing, parked, stuck) is what `report` tells the operator;
- a batch whose handler killed the process counts too: each call stands in a crash marker,
  and a death the previous process left on the batch is a failed attempt (`crashmarkers`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import (
    contexts,
    crashmarkers,
    deadlettering,
    loopclocks,
    metrics,
    ports,
    processing,
)
from eventhub_balancer.contracts import failurepolicy, partitionreports

if TYPE_CHECKING:
    from eventhub_balancer.consumer.partitions import BatchSettings

logger = logging.getLogger(__name__)


class BatchAttempts:
    """The handler calls of one partition's batches, for one epoch."""

    def __init__(
        self,
        *,
        partition: str,
        epoch: int,
        consumer: str,
        pod: str,
        processor: processing.BatchProcessor,
        settings: BatchSettings,
        stats: metrics.PartitionStats,
        stop: asyncio.Event,
        deadline: Callable[[], float | None],
        processing_policy: failurepolicy.Processing | None = None,
        dead_letters: ports.DeadLetters | None = None,
        on_hung: Callable[[str], None] | None = None,
        marks: crashmarkers.PartitionMarks | None = None,
    ) -> None:
        self.partition = partition
        self.marks = marks
        self.epoch = epoch
        self.consumer = consumer
        self.pod = pod
        self.processor = processor
        self.settings = settings
        self.stats = stats
        #: The failure policy, from the assignment: it applies from the next failure on, and
        #: to a parked batch (`_give_up`).
        self._policy = processing_policy or failurepolicy.Processing()
        #: Set when the policy changes: a parked batch is looked at again.
        self._policy_changed = asyncio.Event()
        self.dead_letters = dead_letters
        #: Called with a reason when an abandoned handler call outlives the exit bound.
        self.on_hung = on_hung
        #: The worker's release: set once, read here to stop retrying and to abandon a call.
        self._stop = stop
        #: The release's hard deadline on the loop's clock (None: no release yet).
        self._deadline = deadline
        #: Failed attempts of the batch in flight (0: none failed), and the last error's text.
        self.attempts = 0
        self.last_error = ""
        #: Stopped at its checkpoint by the ``park`` policy, until released.
        self.parked = False
        #: When the batch now in the handler was first tried (None: no batch in flight).
        self._batch_started: float | None = None
        #: When the handler call now running began (None: none running), and the call.
        self._call_started: float | None = None
        self._call: asyncio.Future[None] | None = None

    @property
    def processing_policy(self) -> failurepolicy.Processing:
        return self._policy

    @processing_policy.setter
    def processing_policy(self, policy: failurepolicy.Processing) -> None:
        if policy != self._policy:
            self._policy = policy
            self._policy_changed.set()

    @property
    def handler_running(self) -> bool:
        """A handler call has not ended (also after the worker itself was cancelled)."""
        return self._call is not None and not self._call.done()

    def stuck(self, now: float | None = None) -> bool:
        """A handler call has been running for longer than ``stuck_seconds``."""
        if self._call_started is None:
            return False
        now = loopclocks.now() if now is None else now
        return now - self._call_started > self.settings.stuck_seconds

    def report(self, now: float | None = None) -> partitionreports.PartitionReport | None:
        """What the operator should know of this partition (None: nothing). Parked wins over
        the rest (nothing runs any more); a call running too long is stuck whether or not
        earlier attempts failed; a batch that failed and is being retried (or dead-lettered) is
        failing. The batches set aside at this epoch go with it, alone while nothing is wrong."""
        state: partitionreports.ReportState | None
        error, aside = self.last_error, self.stats.set_aside
        aside = aside if aside is not None and aside.epoch == self.epoch else None
        if self.parked:
            state = "parked"
        elif self.stuck(now):
            state = "stuck"
            # No running time: a text that changes every second is a ConfigMap write a second.
            error = (
                f"handler call running past the stuck limit of "
                f"{self.settings.stuck_seconds:g} s (attempt {self.attempts + 1})"
            )
        elif self.attempts > 0 and self._batch_started is not None:
            state = "failing"
        elif aside is None:
            return None
        else:  # processing normally: the report tells only the batches set aside
            state, error = None, ""
        return partitionreports.PartitionReport(
            partition=self.partition,
            epoch=self.epoch,
            state=state,
            attempts=self.attempts,
            error=partitionreports.first_line(error),
            set_aside=aside,
        )

    async def run(self, events: Sequence[deliveries.ReceivedEvent]) -> bool:
        """Run the handler until it succeeds or the failure policy ends the batch.

        True: the batch is done (handled, or dead-lettered durably): the checkpoint may pass
        it. False: abandoned because of a release, or parked (then only after the release
        came): no checkpoint passes it.
        """
        self._batch_started = loopclocks.now()
        self.attempts = 0
        self.last_error = ""
        backoff = self.settings.retry_backoff
        attempt = 0
        died: crashmarkers.ProcessDied | None = None
        while True:
            attempt += 1
            if attempt == 1 and self.marks is not None:
                attempt, died = await self.marks.resume(events, self.processing_policy)
            context = contexts.BatchContext(
                partition=self.partition,
                epoch=self.epoch,
                consumer=self.consumer,
                pod=self.pod,
                first_sequence_number=events[0].sequence_number,
                last_sequence_number=events[-1].sequence_number,
                size=len(events),
                attempt=attempt,
            )
            self._call_started = loopclocks.now()
            call = self._call = self._start_call(events, context, died)
            died = None
            try:
                done = await self._wait_unless_abandoned(call)
            except Exception as raised:
                e = raised.error if isinstance(raised, processing.HandlerRaised) else raised
                self._call_started = None
                self.stats.handler_errors += 1
                self.stats.stuck = False
                self.stats.failing = True
                self.attempts = attempt
                self.last_error = f"{type(e).__name__}: {e}"
                policy = self.processing_policy
                trace = None if isinstance(e, crashmarkers.ProcessDied) else e  # died: no frames
                if attempt >= policy.max_attempts:
                    logger.error(
                        "partition %s: handler failed on %s %d times "
                        "(the most spec.processing.maxAttempts allows): %s; %s",
                        self.partition,
                        failurepolicy.numbered(
                            context.first_sequence_number, context.last_sequence_number
                        ),
                        attempt,
                        partitionreports.first_line(self.last_error),
                        "dead-lettering the batch"
                        if policy.on_failure == "deadLetter"
                        else "parking the partition",
                        exc_info=trace,
                    )
                    return await self._give_up(events)
                logger.warning(
                    "partition %s: handler failed on %s (attempt %d of %d): %s; retrying in %.1f s",
                    self.partition,
                    failurepolicy.numbered(
                        context.first_sequence_number, context.last_sequence_number
                    ),
                    attempt,
                    policy.max_attempts,
                    partitionreports.first_line(self.last_error),
                    backoff,
                    exc_info=trace if backoff == self.settings.retry_backoff else None,  # 1st here
                )
                if self._stop.is_set() or not await self._sleep_unless_stopped(backoff):
                    self._end_batch()
                    return False
                backoff = min(backoff * 2, self.settings.retry_backoff_max)
                continue
            self._call_started = None
            if done is None:
                logger.info(
                    "partition %s: release: the batch %d-%d was withdrawn before its handler "
                    "ran (the next owner processes it)",
                    self.partition,
                    context.first_sequence_number,
                    context.last_sequence_number,
                )
                self._end_batch()
                return False
            if not done:
                logger.warning(
                    "partition %s: release timeout: abandoned the batch %d-%d (it will be "
                    "processed again by the next owner)",
                    self.partition,
                    context.first_sequence_number,
                    context.last_sequence_number,
                )
                self._end_batch()
                return False
            self._done(events)
            self.stats.events += len(events)
            self.stats.batches += 1
            return True

    def _start_call(
        self,
        events: Sequence[deliveries.ReceivedEvent],
        context: contexts.BatchContext,
        died: crashmarkers.ProcessDied | None = None,
    ) -> asyncio.Future[None]:
        """The processor's call, in a context that tells it of the partition's release, with
        its crash marker; ``died``: no call, the death the previous process left on it."""
        if died is not None:
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(died)
            return failed
        call_context = contextvars.copy_context()
        call_context.run(processing.release_started.set, self._stop)
        call_context.run(processing.handler_waits.set, self._handler_waits)
        # A list of its own on every call: a handler that empties or sorts it (``pop(0)``,
        # ``sort()``) changes neither the batch retried nor the event the checkpoint names.
        call = (
            self.processor
            if self.marks is None
            else functools.partial(self.marks.call, self.processor)
        )
        return call_context.run(asyncio.ensure_future, call(list(events), context))

    def _handler_waits(self, waiting: bool) -> None:  # for a thread: not running yet
        if self._call is not None and not self._call.done():
            self._call_started = None if waiting else loopclocks.now()

    def _end_batch(self) -> None:
        if self.marks is not None:
            self.marks.settled()
        self._batch_started = None
        self._call_started = None
        self.attempts = 0
        self.stats.stuck = False
        self.stats.failing = False

    def _done(self, events: Sequence[deliveries.ReceivedEvent]) -> None:
        """The batch is finished: the checkpoint may pass it."""
        self._end_batch()
        self.last_error = ""
        self.stats.processed_sequence_number = events[-1].sequence_number

    async def _give_up(self, events: Sequence[deliveries.ReceivedEvent]) -> bool:
        """The failure policy, once the attempts are spent."""
        if self.processing_policy.on_failure == "deadLetter":
            if self.dead_letters is not None:
                return await self._dead_letter(events)
            logger.error(
                "partition %s: no dead-letter store is open for this partition; parking it",
                self.partition,
            )
        self.parked = self.stats.parked = True
        self.stats.failing = False  # retried no more: parked, as its report says
        if self.marks is not None:
            await self.marks.record.parked()
        # The partition holds its epoch and its position until it is released (the batch is
        # never skipped, and the next owner starts with it), or until the spec says to set
        # the batch aside: onFailure changed to deadLetter applies to the parked batch too.
        while not self._stop.is_set():
            if self.processing_policy.on_failure == "deadLetter" and self.dead_letters is not None:
                logger.warning(
                    "partition %s: spec.processing.onFailure is deadLetter now: dead-lettering "
                    "the parked batch %d-%d",
                    self.partition,
                    events[0].sequence_number,
                    events[-1].sequence_number,
                )
                self.parked = self.stats.parked = False
                self.stats.failing = True
                return await self._dead_letter(events)
            self._policy_changed.clear()
            waits = [asyncio.ensure_future(e.wait()) for e in (self._stop, self._policy_changed)]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
        self.stats.parked = False
        self._end_batch()
        return False

    async def _dead_letter(self, events: Sequence[deliveries.ReceivedEvent]) -> bool:
        """Write the batch to the dead-letter store, retrying until it is durable (or the
        partition is released: then nothing passes the batch, and the next owner sees it)."""
        assert self.dead_letters is not None
        error = self.last_error  # the handler's: a failed write's error replaces last_error
        name = await deadlettering.write_until_durable(
            self.dead_letters,
            events,
            error=error,
            attempts=self.attempts,
            pod=self.pod,
            epoch=self.epoch,
            backoff=self.settings.retry_backoff,
            backoff_max=self.settings.retry_backoff_max,
            sleep=self._sleep_unless_stopped,
            failed=functools.partial(setattr, self, "last_error"),
        )
        if name is None:
            self._end_batch()
            return False
        logger.warning(
            "partition %s: dead-lettered %s into %s",
            self.partition,
            failurepolicy.numbered(events[0].sequence_number, events[-1].sequence_number),
            name,
        )
        self.stats.dead_lettered_batches += 1
        self.stats.dead_lettered_events += len(events)
        self.stats.set_aside = partitionreports.SetAside.counted(
            self.stats.set_aside, epoch=self.epoch, name=failurepolicy.short_name(name), error=error
        )
        self._done(events)
        return True

    async def _wait_unless_abandoned(self, call: asyncio.Future[None]) -> bool | None:
        """`processing.wait_unless_abandoned`, with this partition's release."""
        return await processing.wait_unless_abandoned(
            call,
            stop=self._stop,
            deadline=self._deadline,
            grace=self.settings.handler_exit_timeout,
            partition=self.partition,
            on_hung=self.on_hung,
        )

    async def _sleep_unless_stopped(self, seconds: float) -> bool:
        """Sleep; False when a release started meanwhile."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            return True
        return False

    def reset(self) -> None:
        """The worker ended: nothing is in flight, failing or parked any more."""
        self._end_batch()
        if self.marks is not None:
            self.marks.ended()
        self.parked = False
        self.stats.parked = False
