"""One owned partition, from fence to release: the consumer's at-least-once core.

For one (partition, epoch) a worker fences the checkpoint, receives with ``owner_level`` =
epoch from right after the checkpoint, hands micro-batches to the handler, and moves the
checkpoint only after the handler returned. The rules that make planned moves free of
duplicates and failures free of loss:

- the checkpoint never passes an event the handler did not finish;
- a fenced checkpoint past the partition's end (the hub created again, or the blob edited)
  is moved back to the start position (`connections`) before any event reaches the handler:
  received from there, every event below it would be skipped;
- the batch goes through the handler under the failure policy (`attempts.BatchAttempts`:
  retries with backoff, then park or dead-letter), and the checkpoint passes it only when it
  is done;
- on release the in-flight batch is finished (or, past the release timeout, abandoned
  without a checkpoint, and never overlapped by the next owner) and no other begins (one
  received with the release is the next owner's), then the final checkpoint is written, and
  only then does the worker report "released" (the runtime acknowledges, and the operator
  assigns the next owner);
- on :class:`errors.OwnershipLost` (from the checkpoint store or a stolen link) the worker
  stops at once and writes nothing: a newer owner holds the partition;
- on a failure of its own (a receive link that could not be mended, the store away) the worker
  ends "failed" and the runtime starts it again from its checkpoint; a checkpoint write in
  flight is let finish first, within a bound (`checkpointwrites`), so that the restart does
  not hand the batch it names to the handler again;
- a new Event Hubs key (`reopen`) closes the link between two batches and opens another at the
  same epoch, after the last event the handler finished: no fence, no release, nothing twice;
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
import functools
import logging
import time
from collections.abc import Callable

from eventhub_balancer import errors, handoffs
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import (
    attempts,
    checkpointwrites,
    crashmarkers,
    loopclocks,
    loopstalls,
    metrics,
    ports,
    processing,
)
from eventhub_balancer.consumer.batchsettings import BatchSettings as BatchSettings
from eventhub_balancer.contracts import failurepolicy, partitionreports

logger = logging.getLogger(__name__)

#: A partition's take-up (at DEBUG for a restart in an outage: `restarts.Restarts`).
TAKEN_UP = "partition %s: processing with epoch %d after sequence number %d"
#: A partition's take-up and hand-over at INFO, each with its delay since the worker started
#: (a slow take-up is the fence, the link or an empty partition) or since the release began
#: (the batch in flight, then the write). The benchmarks time a hand-off's stages from them.
FIRST_EVENTS = "partition %s: epoch %d: first %d events, %.0f ms after the worker started"
FINAL_CHECKPOINT = (
    "partition %s: epoch %d: final checkpoint at sequence number %s, %.0f ms after the release"
)
#: A release with nothing new to write, whose blob a newer owner holds already (it took the
#: partition over while this pod was away, or out of the selector): nothing was written.
TAKEN_OVER = "partition %s: epoch %d: released, nothing written: epoch %d holds it already"


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
        on_fenced: Callable[[], None] | None = None,
        processing_policy: failurepolicy.Processing | None = None,
        dead_letters: ports.DeadLetters | None = None,
        on_hung: Callable[[str], None] | None = None,
        check_position: ports.PositionCheck | None = None,
        marks: crashmarkers.PartitionMarks | None = None,
        take_up_level: int = logging.INFO,
    ) -> None:
        self.partition = partition
        self.epoch = epoch
        self.consumer = consumer
        self.pod = pod
        self.store = store
        self.open_receiver = open_receiver
        self.resolve_start = resolve_start
        #: Checks the fenced checkpoint against the partition's end while the link opens.
        self.check_position = check_position
        self.settings = settings
        self.stats = stats
        #: Called once the partition is fenced and receiving (the runtime acknowledges then).
        self.on_fenced = on_fenced
        self.take_up_level = take_up_level  #: of its line "processing with epoch"
        self.state: handoffs.WorkerState = "fencing"  #: moved only by `transition`
        #: Every state the worker was in, in order (for its log lines and its tests).
        self.path: list[handoffs.WorkerState] = [self.state]
        self.error: BaseException | None = None
        self.fenced = asyncio.Event()
        self._stop = asyncio.Event()
        #: Set when the link is to be opened again (with a new key) before the next batch.
        self.reopen_wanted = asyncio.Event()
        self._hard_deadline: float | None = None
        #: Loop times of the worker's start and of its release's start, for its log lines.
        self._started_at = loopclocks.now()
        self._release_at: float | None = None
        self._first_events = True
        self.received = False  #: a receive answered (events, or none on an open link)
        #: The handler calls, their retries and the failure policy.
        self.batches = attempts.BatchAttempts(
            partition=partition,
            epoch=epoch,
            consumer=consumer,
            pod=pod,
            processor=processor,
            settings=settings,
            stats=stats,
            stop=self._stop,
            deadline=lambda: self._hard_deadline,
            processing_policy=processing_policy,
            dead_letters=dead_letters,
            on_hung=on_hung,
            marks=marks,
        )
        self._processed: deliveries.ReceivedEvent | None = None
        self._checkpointed_sequence: int | None = None
        self._last_checkpoint = loopclocks.now()
        #: The checkpoint write in flight: it overlaps waiting for the next batch, never the
        #: next batch's handler (that would let a crash repeat two batches).
        self._writing = checkpointwrites.InFlight(partition)

    # -- control

    def release(self, *, timeout: float | None = None) -> None:
        """Stop after the in-flight batch (within ``timeout``), checkpoint, and end "released"."""
        if not self._stop.is_set():
            limit = self.settings.release_timeout if timeout is None else timeout
            self._release_at = loopclocks.now()
            self._hard_deadline = self._release_at + limit
            self._stop.set()

    def reopen(self) -> None:
        """Open the link again (the receiver factory holds a new key) before the next batch, at
        the same epoch, after the last event handled; the batch in the handler goes on."""
        self.reopen_wanted.set()

    @property
    def releasing(self) -> bool:
        return self._stop.is_set()

    @property
    def exit_at(self) -> float | None:
        """When a handler call still running past the release makes the process exit."""
        if self._hard_deadline is None:
            return None
        return self._hard_deadline + self.settings.handler_exit_timeout

    @property
    def handler_running(self) -> bool:
        """A handler call has not ended (also after the worker itself was cancelled)."""
        return self.batches.handler_running

    def stuck(self, now: float | None = None) -> bool:
        return self.batches.stuck(now)

    def report(self, now: float | None = None) -> partitionreports.PartitionReport | None:
        return self.batches.report(now)

    def check_stuck(self) -> None:
        """Mark a handler call past the stuck limit on /metrics, and say so once in the log."""
        stuck = self.stuck()
        if stuck and not self.stats.stuck:
            logger.warning(
                "partition %s: a handler call has run past the stuck limit of %g s (attempt %d, "
                "--stuck-seconds): it is reported stuck; the pod stays Ready and goes on with "
                "its other partitions",
                self.partition,
                self.settings.stuck_seconds,
                self.batches.attempts + 1,
            )
        self.stats.stuck = stuck

    def transition(self, event: handoffs.WorkerEvent) -> handoffs.WorkerState:
        """Move along the hand-off table (`handoffs.IllegalTransition` if it has none: a bug)."""
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
            self._stands_at(checkpoint)
            if self._stop.is_set():
                return self._finish("revoked")  # the fence is the final checkpoint
            receiver = self._receive_after(checkpoint.sequence_number)
            if self.check_position is not None:
                # While the link opens: a checkpoint past the partition's end is moved back.
                rewound = await self.check_position(self.partition, checkpoint)
                if rewound is not None:
                    await receiver.close()
                    checkpoint = rewound
                    self._stands_at(checkpoint)
                    receiver = self._receive_after(checkpoint.sequence_number)
            self.transition("fenced")
            self.fenced.set()
            if self.on_fenced is not None:
                self.on_fenced()
            level, sequence_number = self.take_up_level, checkpoint.sequence_number
            logger.log(level, TAKEN_UP, self.partition, self.epoch, sequence_number)
            while not self._stop.is_set():
                if self.reopen_wanted.is_set():
                    self.reopen_wanted.clear()
                    await receiver.close()  # events it buffered past the handler come again
                    receiver = None
                    done = self._processed
                    last = self._checkpointed_sequence if done is None else done.sequence_number
                    receiver = self._receive_after(last)
                asked = loopclocks.now()
                batch = await self._next_batch(receiver)
                if batch is None:
                    continue  # a release (the loop ends) or a reopen (at its top)
                self.received = self.received or bool(batch.events) or batch.linked
                self.stats.last_enqueued = batch.last_enqueued
                if not batch.events:
                    if self._writing.ended:
                        await self._writing.wait()  # an idle partition learns of a lost write
                    if not self._writing.busy and self._checkpoint_due():
                        # An idle partition's last batches, held back by the checkpoint
                        # interval: written once it is over, not left behind until more
                        # events or the release come (a crash would repeat them, and the
                        # backlog would never read zero).
                        self._checkpoint_in_background()
                    continue
                if self._first_events:
                    self._first_events = False
                    logger.info(
                        FIRST_EVENTS,
                        self.partition,
                        self.epoch,
                        len(batch.events),
                        (loopclocks.now() - self._started_at) * 1000,
                    )
                # The crash bound: the previous checkpoint is durable before this handler runs
                # (its error, OwnershipLost above all, surfaces here, before any work).
                await self._writing.wait()
                if self._stop.is_set():
                    continue  # released meanwhile: not a whole handler call more
                if loopclocks.now() - asked > 2 * self.settings.max_wait + loopstalls.STALL_S:
                    await loopstalls.confirm(self.store, self.partition, self.epoch)
                if not await self.batches.run(batch.events):
                    break  # abandoned or parked until the release: no checkpoint past it
                self._processed = batch.events[-1]
                if self._checkpoint_due():
                    self._checkpoint_in_background()
            self.transition("revoked")
            # Stop receiving first: nothing new reaches the handler after the release started.
            await receiver.close()
            receiver = None
            # Nothing new to write: the blob may have gone since our last write (deleted by
            # hand, or with its container); the next owner would start over.
            kept = None if await self._checkpoint() else await self.store.keep(self.partition)
            self.store.release(self.partition)
            if kept is not None and kept.epoch > self.epoch:
                logger.info(TAKEN_OVER, self.partition, self.epoch, kept.epoch)
            else:
                after_ms = (loopclocks.now() - (self._release_at or self._started_at)) * 1000
                at = self._checkpointed_sequence
                logger.info(FINAL_CHECKPOINT, self.partition, self.epoch, at, after_ms)
            return self._finish("checkpointed")
        except errors.OwnershipLost as e:
            self.error = e
            # The loss names its partition ("partition 0: ownership lost, ...").
            logger.warning("%s; stopped without a checkpoint", e)
            return self._finish("ownership_lost")
        except (errors.TransientError, errors.ConfigurationError, errors.InvalidInput) as e:
            self.error = e
            # Said by the runtime's `restarts`, with when it starts again: once for all the
            # partitions it fails together.
            logger.debug("partition %s: epoch %d failed: %s", self.partition, self.epoch, e)
            # The last batch's checkpoint write, if on the wire, is let finish: the restart
            # then starts after that batch instead of handing it to the handler again.
            lost = await self._writing.settle(deadline=lambda: self._hard_deadline, stop=self._stop)
            if lost is not None:
                self.error = lost
                logger.warning("%s; stopped, after the failure: %s", lost, e)
                return self._finish("ownership_lost")
            return self._finish("error")
        finally:
            self.fenced.set()
            await self._writing.cancel()  # in flight still: a loss, a shutdown's cancel
            if receiver is not None:
                await receiver.close()

    def _finish(self, event: handoffs.WorkerEvent) -> handoffs.Outcome:
        """The last transition: ``event`` must end the worker."""
        self.batches.reset()
        match self.transition(event):
            case "released" | "lost" | "failed" as outcome:
                return outcome
            case state:
                raise handoffs.IllegalTransition(state, event)

    def _stands_at(self, checkpoint: ports.Checkpoint) -> None:
        if self.batches.marks is not None:  # the deaths it counts, and how to write them
            write = functools.partial(self.store.record_deaths, self.partition)
            self.batches.marks.record.carry(checkpoint.deaths, write)
        self._checkpointed_sequence = checkpoint.sequence_number
        self.stats.checkpointed_sequence_number = checkpoint.sequence_number
        self.stats.checkpoint_time = time.time()

    def _receive_after(self, sequence_number: int | None) -> ports.Receiver:
        assert sequence_number is not None, "receiving before the fence"
        receiver = self.open_receiver(
            self.partition, self.epoch, deliveries.ReceivePosition.after(sequence_number)
        )
        receiver.start()
        return receiver

    async def _fence(self) -> ports.Checkpoint:
        start = await self.resolve_start(self.partition)
        return await self.store.fence(self.partition, self.epoch, start=start)

    async def _next_batch(self, receiver: ports.Receiver) -> deliveries.ReceivedBatch | None:
        """The next batch, or None when a release or a reopen came while waiting for it, or a
        release came with it (the batch is the next owner's, after the final checkpoint)."""
        receive = asyncio.ensure_future(
            receiver.next_batch(max_size=self.settings.batch_size, max_wait=self.settings.max_wait)
        )
        stop = asyncio.ensure_future(self._stop.wait())
        reopen = asyncio.ensure_future(self.reopen_wanted.wait())
        try:
            await asyncio.wait({receive, stop, reopen}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            reopen.cancel()
            if not receive.done():
                receive.cancel()  # next_batch is cancellation-safe: no event is lost
                await asyncio.gather(receive, return_exceptions=True)
        if receive.cancelled() or (self._stop.is_set() and receive.exception() is None):
            return None
        return receive.result()  # raises OwnershipLost / EventHubUnreachable

    def _checkpoint_due(self) -> bool:
        if self._processed is None:
            return False
        if self._processed.sequence_number == self._checkpointed_sequence:
            return False
        interval = self.settings.checkpoint_interval
        marks = self.batches.marks
        if interval <= 0 or (marks is not None and marks.waiting):
            return True
        return loopclocks.now() - self._last_checkpoint >= interval

    def _checkpoint_in_background(self) -> None:
        """Start writing the checkpoint while the next batch is received; the loop awaits it
        before the next handler call (so at most one write is ever in flight)."""
        self._writing.start(self._checkpoint(wait_previous=False))

    async def _checkpoint(self, *, wait_previous: bool = True) -> bool:
        """Write the last processed event's position, unless it is written already (False)."""
        if wait_previous:
            await self._writing.wait()
        event = self._processed
        if event is None or event.sequence_number == self._checkpointed_sequence:
            return False
        await self.store.update(
            self.partition, offset=event.offset, sequence_number=event.sequence_number
        )
        self._checkpointed_sequence = event.sequence_number
        self._last_checkpoint = loopclocks.now()
        self.stats.checkpoints += 1
        self.stats.checkpointed_sequence_number = event.sequence_number
        self.stats.checkpoint_time = time.time()
        return True
