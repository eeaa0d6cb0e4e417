"""Spark mode's queue of batches waiting for a trigger (`triggers`): what a batch carries,
which batches the next trigger takes, and how a partition's call waits for its batch or
withdraws it.

A batch can be withdrawn, unprocessed, until the handler thread of its trigger starts: the
next owner processes it, so nothing is lost, and a release waits for no trigger that does
not hold its batch. Once the thread runs, the batch is the trigger's: a thread cannot be
stopped, and what it wrote must be checkpointed (or processed again by the next owner).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from eventhub_balancer.consumer import contexts, partitionfailures

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class QueuedBatch:
    """One partition's batch waiting for (or in) a trigger."""

    events: Sequence[contexts.ReceivedEvent]
    context: contexts.BatchContext
    #: Done when the trigger that held it returned (or failed it); replaced by a new one when
    #: it is handed to a later trigger; cancelled when it is withdrawn.
    future: asyncio.Future[None]
    #: When its worker handed it in (loop time).
    queued_at: float
    #: Retried alone: it was in a trigger over several partitions that failed unnamed.
    alone: bool = False
    #: Triggers it was in that failed without counting it an attempt.
    retries: int = 0
    #: In a trigger whose handler thread runs: no longer withdrawable.
    running: bool = False

    @property
    def partition(self) -> str:
        return self.context.partition


def take(queue: list[QueuedBatch], max_events: int) -> list[QueuedBatch]:
    """Out of ``queue``: whole batches, oldest first, up to ``max_events``; a batch retried
    alone goes alone."""
    if not queue:
        return []
    first = queue[0]
    if first.alone:
        taken = [first]
    else:
        taken, total = [], 0
        for batch in queue:
            if batch.alone:
                continue
            if taken and total + len(batch.events) > max_events:
                break
            taken.append(batch)
            total += len(batch.events)
    for batch in taken:
        queue.remove(batch)
    return taken


def withdraw(queue: list[QueuedBatch], batch: QueuedBatch, why: str) -> None:
    """``batch`` (not running) out of ``queue``; a trigger that holds it without running it
    (its session's liveness check after a failure) skips it: its future is done."""
    assert not batch.running, "a running batch cannot be withdrawn"
    if batch in queue:
        queue.remove(batch)
    batch.future.cancel()
    logger.debug(
        "partition %s: batch %d-%d withdrawn before its trigger ran (%s)",
        batch.partition,
        batch.context.first_sequence_number,
        batch.context.last_sequence_number,
        why,
    )


async def until_done(future: asyncio.Future[None], release: asyncio.Event | None) -> None:
    """Until ``future`` is done or ``release`` is set; a cancellation of the caller leaves
    ``future`` as it is (the trigger owns it)."""
    waiting: set[asyncio.Future[Any]] = {future}
    released = None if release is None else asyncio.ensure_future(release.wait())
    if released is not None:
        waiting.add(released)
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if released is not None:
            released.cancel()


class SessionLostAgain(Exception):
    """A trigger lost its SparkSession with a batch that an earlier trigger losing one held
    too: a failed attempt of the batch (when it is alone), as a process death in the handler
    is in plain mode (`crashmarkers`)."""

    def __init__(self, error: BaseException) -> None:
        try:
            told = f"{type(error).__name__}: {error}"
        except Exception:  # py4j asks the lost JVM for a Java exception's text
            told = type(error).__name__
        super().__init__(
            "the SparkSession was lost again with this batch in the trigger (its JVM killed, "
            f"out of memory, or its server gone): {told}"
        )


def requeue(queue: list[QueuedBatch], taken: list[QueuedBatch]) -> None:
    """Hand every batch of a trigger whose session was lost to the next trigger, as it
    was: no attempt counted, not retried alone."""
    requeued = []
    for batch in taken:
        if batch.future.done():
            continue
        handed_on, batch.future = batch.future, asyncio.get_running_loop().create_future()
        handed_on.set_result(None)  # its waiter now waits for the new future
        requeued.append(batch)
    queue[:0] = requeued


def fail(
    queue: list[QueuedBatch], taken: list[QueuedBatch], error: Exception, trigger: int
) -> None:
    """Fail the batches the error can be pinned on; hand the others to a later trigger."""
    named = error.failures if isinstance(error, partitionfailures.PartitionsFailed) else {}
    pinned = {b.partition for b in taken} & set(named)
    requeued: list[QueuedBatch] = []
    for batch in taken:
        if batch.future.done():
            continue
        if batch.partition in pinned:
            cause = named[batch.partition]
            batch.future.set_exception(
                cause
                if isinstance(cause, Exception)
                else partitionfailures.PartitionFailed(str(cause))
            )
        elif not pinned and len(taken) == 1:
            batch.future.set_exception(error)
        else:
            batch.retries += 1
            batch.alone = batch.alone or not pinned
            handed_on, batch.future = batch.future, asyncio.get_running_loop().create_future()
            handed_on.set_result(None)  # its waiter now waits for the new future
            requeued.append(batch)
    if requeued:
        logger.warning(
            "trigger %d over partitions %s failed: %r; %s",
            trigger,
            sorted(b.partition for b in taken),
            error,
            "retrying the others"
            if pinned
            else "retrying each partition alone to tell which one fails",
        )
    queue[:0] = requeued
