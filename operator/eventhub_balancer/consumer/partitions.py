"""One owned partition, from fence to release: the consumer's at-least-once core.

For one (partition, epoch) a worker fences the checkpoint, receives with ``owner_level`` =
epoch from right after the checkpoint, hands micro-batches to the handler, and moves the
checkpoint only after the handler returned. The rules that make planned moves free of
duplicates and failures free of loss:

- the checkpoint never passes an event the handler did not finish;
- a handler error is retried (with backoff) on the same batch, never skipped; after the
  assignment's ``processing.maxAttempts`` the batch is parked (the partition stops at its
  checkpoint, before the batch) or dead-lettered (written beside the checkpoints, and only
  once that write is durable does the checkpoint pass the batch);
- on release the in-flight batch is finished (or, past the release timeout, abandoned
  without a checkpoint), then the final checkpoint is written, and only then does the worker
  report "released" (the runtime then acknowledges, and the operator assigns the next owner).
  An abandoned handler call that does not end when cancelled (a sync handler's thread cannot
  be stopped) holds the release back: the next owner must not overlap it. Past
  ``handler_exit_timeout`` more the worker calls ``on_hung`` (the runtime exits the process,
  and the operator takes the partitions over as from a dead pod);
- on :class:`errors.OwnershipLost` (from the checkpoint store or a stolen link) the worker
  stops at once and writes nothing: a newer owner holds the partition;
- the handler of batch N+1 starts only once the checkpoint of batch N is durable, so a crash
  (SIGKILL) repeats at most one batch per partition: the one in the handler, or the one whose
  checkpoint write was in flight (never both). The write still overlaps the *receiving* of
  batch N+1: the receiver's background task keeps buffering, and the worker waits for the
  next batch while the write is on the wire.

The worker's states and their order are the hand-off table's (``handoffs.WORKER_TRANSITIONS``):
every change of state goes through :meth:`PartitionWorker.transition`. Deadlines are read
from the event loop's clock, the one the runtime's timers run on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from eventhub_balancer import errors, handoffs
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import contexts, metrics, ports, processing
from eventhub_balancer.contracts import failurepolicy, partitionreports

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchSettings:
    """How batches are cut, retried and checkpointed."""

    batch_size: int = 500
    #: Seconds a batch may wait for more events after its first one arrived.
    max_wait: float = 1.0
    #: 0: checkpoint after every batch; more: at most this often (the release writes the rest).
    checkpoint_interval: float = 0.0
    retry_backoff: float = 0.5
    retry_backoff_max: float = 30.0
    #: A handler call running longer than this is reported ``stuck`` (the pod stays Ready).
    stuck_seconds: float = 120.0
    #: On release, the longest wait for the in-flight batch before abandoning it.
    release_timeout: float = 20.0
    #: Past the release timeout, how long an abandoned handler call that ignores cancellation
    #: (a sync handler's thread) may still run before the pod process exits. Keep the release
    #: timeout plus this below the CR's ``handoffTimeoutSeconds`` (30 s by default), after
    #: which the operator assigns the partition anyway.
    handler_exit_timeout: float = 5.0
    #: Events the receiver may buffer ahead of the handler.
    prefetch: int = 300

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise errors.InvalidInput("--batch-size", f"{self.batch_size} is less than 1")
        if self.max_wait <= 0:
            raise errors.InvalidInput("--max-wait", f"{self.max_wait} is not positive")
        if self.checkpoint_interval < 0:
            raise errors.InvalidInput("--checkpoint-interval", "must not be negative")
        if self.stuck_seconds <= 0:
            raise errors.InvalidInput("--stuck-seconds", f"{self.stuck_seconds} is not positive")
        if self.release_timeout <= 0:
            raise errors.InvalidInput(
                "--release-timeout", f"{self.release_timeout} is not positive"
            )
        if self.handler_exit_timeout <= 0:
            raise errors.InvalidInput(
                "--handler-exit-seconds", f"{self.handler_exit_timeout} is not positive"
            )


class PartitionWorker:
    """Processes one partition for one epoch; ``run()`` returns how it ended."""

    def __init__(
        self,
        *,
        partition: str,
        epoch: int,
        consumer: str,
        pod: str,
        store: ports.Checkpoints,
        open_receiver: ports.ReceiverFactory,
        resolve_start: ports.StartResolver,
        processor: processing.BatchProcessor,
        settings: BatchSettings,
        stats: metrics.PartitionStats,
        spark: Any = None,
        on_fenced: Callable[[], None] | None = None,
        processing_policy: failurepolicy.Processing | None = None,
        dead_letters: ports.DeadLetters | None = None,
        on_hung: Callable[[str], None] | None = None,
    ) -> None:
        self.partition = partition
        self.epoch = epoch
        self.consumer = consumer
        self.pod = pod
        self.store = store
        self.open_receiver = open_receiver
        self.resolve_start = resolve_start
        self.processor = processor
        self.settings = settings
        self.stats = stats
        self.spark = spark
        #: Called once the partition is fenced and receiving (the runtime acknowledges then).
        self.on_fenced = on_fenced
        #: What to do with a batch that keeps failing; the runtime updates it with the
        #: assignment, and it applies from the next failure on.
        self.processing_policy = processing_policy or failurepolicy.Processing()
        self.dead_letters = dead_letters
        #: Called with a reason when an abandoned handler call outlives the exit bound.
        self.on_hung = on_hung
        #: Failed attempts of the batch in flight (0: none failed), and the last error's text.
        self.attempts = 0
        self.last_error = ""
        #: Stopped at its checkpoint by the ``park`` policy, until released.
        self.parked = False
        #: Moved only by `transition`, along the hand-off table.
        self.state: handoffs.WorkerState = "fencing"
        #: Every state the worker was in, in order (for its log lines and its tests).
        self.path: list[handoffs.WorkerState] = [self.state]
        self.error: BaseException | None = None
        self.fenced = asyncio.Event()
        self._stop = asyncio.Event()
        self._hard_deadline: float | None = None
        #: When the batch now in the handler was first tried (None: no batch in flight).
        self._batch_started: float | None = None
        #: When the handler call now running began (None: none running), and the call.
        self._call_started: float | None = None
        self._call: asyncio.Future[None] | None = None
        self._processed: deliveries.ReceivedEvent | None = None
        self._checkpointed_sequence: int | None = None
        self._last_checkpoint = _now()
        #: The checkpoint write in flight: it overlaps waiting for the next batch, never the
        #: next batch's handler (that would let a crash repeat two batches).
        self._writing: asyncio.Task[None] | None = None

    # -- control

    def release(self, *, timeout: float | None = None) -> None:
        """Stop after the in-flight batch (within ``timeout``), checkpoint, and end "released"."""
        if not self._stop.is_set():
            limit = self.settings.release_timeout if timeout is None else timeout
            self._hard_deadline = _now() + limit
            self._stop.set()

    @property
    def releasing(self) -> bool:
        return self._stop.is_set()

    @property
    def handler_running(self) -> bool:
        """A handler call has not ended (also after the worker itself was cancelled)."""
        return self._call is not None and not self._call.done()

    def stuck(self, now: float | None = None) -> bool:
        """A handler call has been running for longer than ``stuck_seconds``."""
        if self._call_started is None:
            return False
        now = _now() if now is None else now
        return now - self._call_started > self.settings.stuck_seconds

    def report(self, now: float | None = None) -> partitionreports.PartitionReport | None:
        """What the operator should know of this partition's trouble (None: none).

        Parked wins over the rest (nothing runs any more); a call running too long is stuck
        whether or not earlier attempts failed; a batch that failed and is being retried (or
        dead-lettered) is failing.
        """
        state: partitionreports.ReportState
        error = self.last_error
        if self.parked:
            state = "parked"
        elif self.stuck(now):
            assert self._call_started is not None
            state = "stuck"
            running = (_now() if now is None else now) - self._call_started
            error = f"handler call running for {running:.0f} s (attempt {self.attempts + 1})"
        elif self.attempts > 0 and self._batch_started is not None:
            state = "failing"
        else:
            return None
        return partitionreports.PartitionReport(
            partition=self.partition,
            epoch=self.epoch,
            state=state,
            attempts=self.attempts,
            error=partitionreports.first_line(error),
        )

    def transition(self, event: handoffs.WorkerEvent) -> handoffs.WorkerState:
        """Move along the hand-off table; `handoffs.IllegalTransition` when it has no such move
        (a bug: the worker's state is then left as it was)."""
        before = self.state
        self.state = handoffs.next_worker_state(before, event)
        self.path.append(self.state)
        logger.debug("partition %s: %s -%s-> %s", self.partition, before, event, self.state)
        return self.state

    # -- the loop

    async def run(self) -> handoffs.Outcome:
        receiver: ports.Receiver | None = None
        try:
            checkpoint = await self._fence()
            self._checkpointed_sequence = checkpoint.sequence_number
            self.stats.checkpointed_sequence_number = checkpoint.sequence_number
            self.stats.checkpoint_time = time.time()
            if self._stop.is_set():
                return self._finish("revoked")  # the fence is the final checkpoint
            receiver = self.open_receiver(
                self.partition,
                self.epoch,
                deliveries.ReceivePosition.after(checkpoint.sequence_number),
            )
            receiver.start()
            self.transition("fenced")
            self.fenced.set()
            if self.on_fenced is not None:
                self.on_fenced()
            logger.info(
                "partition %s: processing with epoch %d after sequence number %d",
                self.partition,
                self.epoch,
                checkpoint.sequence_number,
            )
            while not self._stop.is_set():
                batch = await self._next_batch(receiver)
                if batch is None:
                    break
                self.stats.last_enqueued = batch.last_enqueued
                if not batch.events:
                    if self._writing is not None and self._writing.done():
                        await self._await_writing()  # an idle partition learns of a lost write
                    continue
                # The crash bound: the previous checkpoint is durable before this handler runs
                # (its error, OwnershipLost above all, surfaces here, before any work).
                await self._await_writing()
                if not await self._process(batch.events):
                    break  # abandoned or parked until the release: no checkpoint past it
                if self._checkpoint_due():
                    self._checkpoint_in_background()
            self.transition("revoked")
            # Stop receiving first: nothing new reaches the handler after the release started.
            await receiver.close()
            receiver = None
            await self._checkpoint()
            self.store.release(self.partition)
            return self._finish("checkpointed")
        except errors.OwnershipLost as e:
            self.error = e
            logger.warning("partition %s: %s; stopped without a checkpoint", self.partition, e)
            return self._finish("ownership_lost")
        except (errors.TransientError, errors.ConfigurationError, errors.InvalidInput) as e:
            self.error = e
            logger.error("partition %s: epoch %d failed: %s", self.partition, self.epoch, e)
            return self._finish("error")
        finally:
            self.fenced.set()
            if self._writing is not None and not self._writing.done():
                self._writing.cancel()
                await asyncio.gather(self._writing, return_exceptions=True)
            if receiver is not None:
                await receiver.close()

    def _finish(self, event: handoffs.WorkerEvent) -> handoffs.Outcome:
        """The last transition: ``event`` must end the worker."""
        self._batch_started = None
        self._call_started = None
        self.attempts = 0
        self.parked = False
        self.stats.stuck = self.stats.failing = self.stats.parked = False
        match self.transition(event):
            case "released" | "lost" | "failed" as outcome:
                return outcome
            case state:
                raise handoffs.IllegalTransition(state, event)

    async def _fence(self) -> ports.Checkpoint:
        start = await self.resolve_start(self.partition)
        return await self.store.fence(self.partition, self.epoch, start=start)

    async def _next_batch(self, receiver: ports.Receiver) -> deliveries.ReceivedBatch | None:
        """The next batch, or None when a release started while waiting for it."""
        receive = asyncio.ensure_future(
            receiver.next_batch(max_size=self.settings.batch_size, max_wait=self.settings.max_wait)
        )
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({receive, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not receive.done():
                receive.cancel()  # next_batch is cancellation-safe: no event is lost
                await asyncio.gather(receive, return_exceptions=True)
        if receive.cancelled():
            return None
        return receive.result()  # raises OwnershipLost / EventHubUnreachable

    async def _process(self, events: Sequence[deliveries.ReceivedEvent]) -> bool:
        """Run the handler until it succeeds or the failure policy ends the batch.

        True: the batch is done (handled, or dead-lettered durably): the checkpoint may pass
        it. False: abandoned because of a release, or parked (then only after the release
        came): no checkpoint passes it.
        """
        self._batch_started = _now()
        self.attempts = 0
        self.last_error = ""
        backoff = self.settings.retry_backoff
        attempt = 0
        while True:
            attempt += 1
            context = contexts.BatchContext(
                partition=self.partition,
                epoch=self.epoch,
                consumer=self.consumer,
                pod=self.pod,
                first_sequence_number=events[0].sequence_number,
                last_sequence_number=events[-1].sequence_number,
                size=len(events),
                spark=self.spark,
                attempt=attempt,
            )
            self._call_started = _now()
            call = self._call = asyncio.ensure_future(self.processor(events, context))
            try:
                done = await self._wait_unless_abandoned(call)
            except Exception as e:
                self._call_started = None
                self.stats.handler_errors += 1
                self.stats.stuck = False
                self.stats.failing = True
                self.attempts = attempt
                self.last_error = f"{type(e).__name__}: {e}"
                policy = self.processing_policy
                if attempt >= policy.max_attempts:
                    logger.error(
                        "partition %s: handler failed on sequence numbers %d-%d %d times "
                        "(the most spec.processing.maxAttempts allows): %r; %s",
                        self.partition,
                        context.first_sequence_number,
                        context.last_sequence_number,
                        attempt,
                        e,
                        "dead-lettering the batch"
                        if policy.on_failure == "deadLetter"
                        else "parking the partition",
                    )
                    return await self._give_up(events)
                logger.warning(
                    "partition %s: handler failed on sequence numbers %d-%d (attempt %d of "
                    "%d): %r; retrying in %.1f s",
                    self.partition,
                    context.first_sequence_number,
                    context.last_sequence_number,
                    attempt,
                    policy.max_attempts,
                    e,
                    backoff,
                )
                if self._stop.is_set() or not await self._sleep_unless_stopped(backoff):
                    self._end_batch()
                    return False
                backoff = min(backoff * 2, self.settings.retry_backoff_max)
                continue
            self._call_started = None
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

    def _end_batch(self) -> None:
        self._batch_started = None
        self._call_started = None
        self.attempts = 0
        self.stats.stuck = False
        self.stats.failing = False

    def _done(self, events: Sequence[deliveries.ReceivedEvent]) -> None:
        """The batch is finished: the checkpoint may pass it."""
        self._processed = events[-1]
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
        self.parked = True
        self.stats.parked = True
        # The partition holds its epoch and its position until it is released: the batch is
        # never skipped, and the next owner starts with it.
        await self._stop.wait()
        self.stats.parked = False
        self._end_batch()
        return False

    async def _dead_letter(self, events: Sequence[deliveries.ReceivedEvent]) -> bool:
        """Write the batch to the dead-letter store, retrying until it is durable (or the
        partition is released: then nothing passes the batch, and the next owner sees it)."""
        assert self.dead_letters is not None
        error = self.last_error
        delay = self.settings.retry_backoff
        while True:
            try:
                name = await self.dead_letters.write(
                    events,
                    error=error,
                    attempts=self.attempts,
                    pod=self.pod,
                    epoch=self.epoch,
                )
            except (errors.TransientError, errors.ConfigurationError) as e:
                self.last_error = f"dead-letter write failed: {e}"
                logger.warning(
                    "partition %s: %s; retrying in %.1f s", self.partition, self.last_error, delay
                )
                if not await self._sleep_unless_stopped(delay):
                    self._end_batch()
                    return False
                delay = min(delay * 2, self.settings.retry_backoff_max)
                continue
            break
        logger.warning(
            "partition %s: dead-lettered sequence numbers %d-%d into %s",
            self.partition,
            events[0].sequence_number,
            events[-1].sequence_number,
            name,
        )
        self.stats.dead_lettered_batches += 1
        self.stats.dead_lettered_events += len(events)
        self._done(events)
        return True

    async def _wait_unless_abandoned(self, call: asyncio.Future[None]) -> bool:
        """Wait for the handler; past the release deadline cancel it (False).

        While no release is asked for, the handler may run as long as it needs (past
        ``stuck_seconds`` the partition is reported stuck; the pod stays Ready).
        """
        while not call.done():
            if self._hard_deadline is not None:
                try:
                    async with asyncio.timeout_at(self._hard_deadline):
                        await asyncio.wait({call})
                except TimeoutError:
                    await self._abandon(call, deadline=self._hard_deadline)
                    return False
            else:
                stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
                try:
                    await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.cancel()
            self.stats.stuck = self.stuck()
        call.result()
        return True

    async def _abandon(self, call: asyncio.Future[None], *, deadline: float) -> None:
        """Cancel the handler call and wait until it has really ended.

        An async handler that honours cancellation ends at once. A sync handler's thread
        cannot be stopped, and its processor's call ends only when the thread does: until
        then the release is not acknowledged, so the next owner never overlaps it. Past
        ``handler_exit_timeout`` the worker calls ``on_hung`` (the process exits).
        """
        call.cancel()
        exit_at = deadline + self.settings.handler_exit_timeout
        done, _ = await asyncio.wait({call}, timeout=max(0.0, exit_at - _now()))
        if not done:
            reason = (
                f"partition {self.partition}: the handler still runs "
                f"{self.settings.handler_exit_timeout:g} s past its release deadline and "
                "cannot be cancelled"
            )
            logger.critical("%s: exiting so that the next owner can take over", reason)
            if self.on_hung is not None:
                self.on_hung(reason)
            await asyncio.wait({call})  # the process is on its way out
        if not call.cancelled() and call.exception() is not None:
            logger.debug("partition %s: the abandoned call raised", self.partition)

    async def _sleep_unless_stopped(self, seconds: float) -> bool:
        """Sleep; False when a release started meanwhile."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            return True
        return False

    def _checkpoint_due(self) -> bool:
        if self._processed is None:
            return False
        if self._processed.sequence_number == self._checkpointed_sequence:
            return False
        interval = self.settings.checkpoint_interval
        return interval <= 0 or _now() - self._last_checkpoint >= interval

    def _checkpoint_in_background(self) -> None:
        """Start writing the checkpoint while the next batch is received; the loop awaits it
        before the next handler call (so at most one write is ever in flight)."""
        assert self._writing is None, "a checkpoint write is still in flight"
        self._writing = asyncio.create_task(self._checkpoint(wait_previous=False))

    async def _await_writing(self) -> None:
        writing, self._writing = self._writing, None
        if writing is not None:
            await writing

    async def _checkpoint(self, *, wait_previous: bool = True) -> None:
        """Write the last processed event's position, unless it is written already."""
        if wait_previous:
            await self._await_writing()
        event = self._processed
        if event is None or event.sequence_number == self._checkpointed_sequence:
            return
        await self.store.update(
            self.partition, offset=event.offset, sequence_number=event.sequence_number
        )
        self._checkpointed_sequence = event.sequence_number
        self._last_checkpoint = _now()
        self.stats.checkpoints += 1
        self.stats.checkpointed_sequence_number = event.sequence_number
        self.stats.checkpoint_time = time.time()


def _now() -> float:
    """The event loop's clock: the one its timers (and a test's fake time) run on."""
    return asyncio.get_running_loop().time()
