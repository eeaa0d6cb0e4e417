"""Run a handler over given events, as ``ehb consume`` would, without Event Hubs or Kubernetes.

A team's first test of a handler should not need the local stack: build events with
:func:`events`, call :func:`run` (or :func:`run_spark` with a SparkSession), and assert on the
returned :class:`Outcome` (did the runtime checkpoint, or would it retry?) and on the
handler's own effects. The handler is checked against its protocol first, exactly as at the
pod's start, and called the way the runtime calls it: an ``async def`` handler awaited on the
loop, a plain one in a thread; a Spark handler with the DataFrame the runtime builds (from
Arrow, with the batch schema) and a :class:`~eventhub_balancer.consumer.TriggerContext`.
``revoke_after`` cancels the call as a revocation past the release timeout does, and
``attempt`` sets the context's retry count, so retry and revocation paths are testable too.

::

    from eventhub_balancer.consumer import testing

    def test_orders_are_counted():
        outcome = testing.run(pipeline.process, testing.events([{"id": 1}, {"id": 2}]))
        assert outcome.checkpointed
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from eventhub_balancer.consumer import contexts, processing, protocols

#: The enqueued time of the first generated event (events follow one millisecond apart).
FIRST_ENQUEUED: Final = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def events(
    bodies: Iterable[bytes | str | Mapping[str, Any]],
    *,
    partition: str = "0",
    first_sequence_number: int = 0,
    properties: Mapping[str, Any] | None = None,
    partition_key: str | None = None,
) -> list[contexts.Event]:
    """Events of one partition in sequence order; a mapping body is sent as JSON, a string as
    UTF-8, as producers usually send them, bytes as they are; anything else is a TypeError.

    ``properties`` are the application properties as sent; the events carry them as the
    runtime hands them over, text values as UTF-8 bytes (``{"tenant": "acme"}`` reads
    ``event.properties["tenant"] == b"acme"``), as the Event Hubs SDK delivers them."""
    received = {_key(k): _as_received(v) for k, v in (properties or {}).items()}
    made = []
    for index, body in enumerate(bodies):
        if isinstance(body, Mapping):
            raw = json.dumps(body).encode()
        elif isinstance(body, str):
            raw = body.encode()
        elif isinstance(body, bytes | bytearray | memoryview):
            raw = bytes(body)
        else:
            # ``bytes(1)`` is a zero byte and ``bytes([1, 2])`` two raw bytes: a body no
            # producer sent, that the handler under test would fail on for the wrong reason.
            raise TypeError(
                f"body {index} is a {type(body).__name__}: give bytes, a str (sent as UTF-8) "
                "or a mapping (sent as JSON)"
            )
        sequence_number = first_sequence_number + index
        made.append(
            contexts.Event(
                partition=partition,
                sequence_number=sequence_number,
                # The SDK's offsets are opaque strings; byte positions are typical.
                offset=str(sequence_number * 1024),
                enqueued_time=FIRST_ENQUEUED + datetime.timedelta(milliseconds=sequence_number),
                partition_key=partition_key,
                properties=dict(received),
                body=raw,
            )
        )
    return made


def _key(key: Any) -> str:
    """A property name as the runtime gives it (`adapters.receiving.to_event`): text."""
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)


def _as_received(value: Any) -> Any:
    """A property value as a handler in a pod gets it: the SDK's AMQP decoder reads text and
    binary alike, so text arrives as UTF-8 bytes, in lists and maps too (map keys included)."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list | tuple):
        return [_as_received(v) for v in value]
    if isinstance(value, Mapping):
        return {_as_received(k): _as_received(v) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """What the runtime would make of one call of a handler over one partition's batch."""

    #: What the handler was called with.
    context: contexts.BatchContext
    #: What the handler raised; None when it returned.
    error: BaseException | None = None
    #: The call was cancelled by ``revoke_after`` (a revocation past the release timeout).
    revoked: bool = False

    @property
    def checkpointed(self) -> bool:
        """The runtime checkpoints a batch only after its handler returned."""
        return self.error is None and not self.revoked

    @property
    def failed_partitions(self) -> frozenset[str]:
        """The partition whose batch counts a failed attempt: none when it checkpointed, nor
        when it was revoked (the runtime abandons such a batch to the next owner, uncounted)."""
        if self.error is None or self.revoked:
            return frozenset()
        return frozenset({self.context.partition})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TriggerOutcome:
    """What the runtime would make of one call of a Spark handler over a trigger."""

    #: What the handler was called with besides the DataFrame.
    context: contexts.TriggerContext
    #: What the handler raised; None when it returned.
    error: BaseException | None = None

    @property
    def checkpointed(self) -> bool:
        """Every partition of the trigger checkpoints only after the handler returned."""
        return self.error is None

    @property
    def failed_partitions(self) -> frozenset[str]:
        """The partitions whose batches count a failed attempt: those the handler named in
        `PartitionsFailed`, else every partition of the trigger (a `PartitionsFailed` leaves
        the others to the next trigger, uncounted)."""
        if self.error is None:
            return frozenset()
        from eventhub_balancer.consumer import partitionfailures

        if isinstance(self.error, partitionfailures.PartitionsFailed):
            return frozenset(self.error.failures) & frozenset(self.context.partitions)
        return frozenset(self.context.partitions)


def _name(handler: Callable[..., Any]) -> str:
    return f"{getattr(handler, '__module__', '?')}:{getattr(handler, '__qualname__', handler)}"


def batch_context(
    batch: Sequence[contexts.Event],
    *,
    epoch: int = 1,
    consumer: str = "test",
    pod: str = "test-0",
    attempt: int = 1,
) -> contexts.BatchContext:
    """The context the runtime passes with ``batch`` (one partition's events, in order)."""
    if not batch:
        raise ValueError("a batch holds at least one event: the runtime never hands out none")
    partitions = {e.partition for e in batch}
    if len(partitions) != 1:
        raise ValueError(f"a batch is one partition's events, not {sorted(partitions)}")
    return contexts.BatchContext(
        partition=batch[0].partition,
        epoch=epoch,
        consumer=consumer,
        pod=pod,
        first_sequence_number=batch[0].sequence_number,
        last_sequence_number=batch[-1].sequence_number,
        size=len(batch),
        attempt=attempt,
    )


async def run_async(
    handler: protocols.Handler | Callable[..., Any],
    batch: Sequence[contexts.Event],
    *,
    epoch: int = 1,
    consumer: str = "test",
    pod: str = "test-0",
    attempt: int = 1,
    revoke_after: float | None = None,
) -> Outcome:
    """:func:`run` on the caller's event loop (for async tests)."""
    protocols.check(handler, reference=_name(handler), spark=False, remedy="test it with run_spark")
    context = batch_context(batch, epoch=epoch, consumer=consumer, pod=pod, attempt=attempt)
    # A list of its own, as the runtime hands each call (`attempts.BatchAttempts`).
    call = asyncio.ensure_future(processing.PlainProcessor(handler)(list(batch), context))
    try:
        done, _ = await asyncio.wait({call}, timeout=revoke_after)
        if not done:
            # The runtime past a release's deadline: cancel, wait until the call has really
            # ended (a thread only ends by itself), and count nothing, however it ended.
            call.cancel()
            await asyncio.wait({call})
            if not call.cancelled():
                call.exception()  # retrieved: an abandoned call's error is not reported
            return Outcome(context=context, revoked=True)
    except asyncio.CancelledError:
        call.cancel()  # the caller's test was cancelled: the call goes with it
        raise
    if call.cancelled():
        # Nothing cancelled it: the handler raised CancelledError itself, a failed attempt.
        return Outcome(context=context, error=asyncio.CancelledError("the handler raised it"))
    error = call.exception()
    if isinstance(error, processing.HandlerRaised):
        error = error.error  # SystemExit and the like: what the handler raised
    return Outcome(context=context, error=error)


def run(
    handler: protocols.Handler | Callable[..., Any],
    batch: Sequence[contexts.Event],
    *,
    epoch: int = 1,
    consumer: str = "test",
    pod: str = "test-0",
    attempt: int = 1,
    revoke_after: float | None = None,
) -> Outcome:
    """Call ``handler(batch, context)`` once as the runtime does, and say what it would do.

    ``revoke_after`` cancels an ``async def`` handler after that many seconds, as a revocation
    past the release timeout does. A plain handler's thread cannot be cancelled, in the
    runtime as here: the outcome is ``revoked`` all the same, and ``run`` returns once the
    thread has ended. A revoked call is revoked however it ended (returned after all, or
    raised): the runtime never checkpoints it and counts no failed attempt.

    Whatever the handler raises is the outcome's ``error``, `BaseException` subclasses
    included (``SystemExit``, a ``CancelledError`` nothing asked for), as the runtime counts
    each as a failed attempt. The handler gets a list of its own: ``batch`` stays as it is.
    """
    return asyncio.run(
        run_async(
            handler,
            batch,
            epoch=epoch,
            consumer=consumer,
            pod=pod,
            attempt=attempt,
            revoke_after=revoke_after,
        )
    )


def run_spark(
    handler: protocols.SparkHandler | Callable[..., Any],
    batch: Sequence[contexts.Event],
    *,
    spark: Any,
    batch_id: int = 1,
    epochs: Mapping[str, int] | None = None,
    consumer: str = "test",
    pod: str = "test-0",
    attempt: int = 1,
) -> TriggerOutcome:
    """Call a Spark handler once with the DataFrame and TriggerContext of a trigger over
    ``batch`` (events of one or more partitions), on the SparkSession ``spark``."""
    from eventhub_balancer.spark import frames

    protocols.check(handler, reference=_name(handler), spark=True, remedy="test it with run")
    by_partition: dict[str, list[contexts.Event]] = {}
    for event in batch:
        by_partition.setdefault(event.partition, []).append(event)
    ranges = {
        partition: contexts.PartitionRange(
            partition=partition,
            epoch=(epochs or {}).get(partition, 1),
            first_sequence_number=share[0].sequence_number,
            last_sequence_number=share[-1].sequence_number,
            size=len(share),
        )
        for partition, share in by_partition.items()
    }
    context = contexts.TriggerContext(
        batch_id=batch_id,
        consumer=consumer,
        pod=pod,
        partitions=ranges,
        size=len(batch),
        spark=spark,
        attempt=attempt,
    )
    ordered = [e for share in by_partition.values() for e in share]
    df = frames.to_dataframe(spark, ordered, batch_id=batch_id, ranges=ranges)
    try:
        handler(df, context)
    except KeyboardInterrupt:
        raise  # here the handler runs in the test's own thread: that is Ctrl-C
    except BaseException as e:
        # The runtime counts any of these as a failed trigger (`processing.run_in_thread`).
        return TriggerOutcome(context=context, error=e)
    return TriggerOutcome(context=context)
