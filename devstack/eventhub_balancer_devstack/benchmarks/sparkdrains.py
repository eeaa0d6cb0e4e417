"""The Spark side of ``ehb bench consumer``: pod-level triggers on a warm local session.

The drain itself is `consuming.runtime_drain` with `spark_triggers` as its processor, so that
plain and Spark mode are timed by the same code from the same moment (every receiver open).
The handler runs one job over every row of each trigger (a count per partition): the
cheapest handler that reads all of its DataFrame.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import contexts, processing, triggers


def _spark_count(df: Any, context: contexts.TriggerContext) -> None:
    """The Spark drain's handler: one job over every row (a count per partition)."""
    counted = sum(row["count"] for row in df.groupBy("partition").count().collect())
    if counted != context.size:
        raise AssertionError(f"trigger {context.batch_id}: {counted} rows, {context.size} events")


def spark_triggers(session: Any, *, consumer: str = "bench") -> triggers.SparkTriggers:
    """Pod-level triggers with the counting handler, on a session that has started."""

    async def started() -> Any:
        return session

    return triggers.SparkTriggers(
        _spark_count,
        session=started,
        consumer=consumer,
        pod="bench-pod",
        executor=processing.handler_threads(),
    )


def start_session() -> tuple[Any, float]:
    """The benchmark's local[2] SparkSession, warmed up as ``ehb consume`` does, and the
    seconds that took."""
    from eventhub_balancer.spark import frames, sessions

    began = time.perf_counter()
    session = sessions.build_session(app_name="ehb-bench")
    frames.warm_up(session)
    return session, time.perf_counter() - began


async def trigger_overhead_ms(session: Any, *, events: int = 1_000, repeats: int = 5) -> float:
    """Median milliseconds of a trigger of ``events`` over 8 partitions on a warm session:
    from the batches' hand-over to the calls' return, through the Arrow table, the DataFrame
    and one Spark job (the counting handler: the cheapest that reads every row)."""
    now = datetime.datetime.now(datetime.UTC)
    per_partition = events // 8
    timings = []
    spark = spark_triggers(session)
    for attempt in range(repeats + 1):  # the first one warms the session up
        handed_over = []
        for p in range(8):
            batch = [
                deliveries.ReceivedEvent(
                    partition=str(p),
                    sequence_number=n,
                    offset=str(n * 128),
                    enqueued_time=now + datetime.timedelta(milliseconds=n),
                    partition_key=f"key-{n % 50}",
                    properties={"n": n},
                    body=b"x" * 100,
                )
                for n in range(per_partition)
            ]
            context = contexts.BatchContext(
                partition=str(p),
                epoch=attempt + 1,
                consumer="bench",
                pod="bench-pod",
                first_sequence_number=0,
                last_sequence_number=per_partition - 1,
                size=per_partition,
            )
            handed_over.append((batch, context))
        # Timed from the hand-over: the events' objects exist before (a receiver makes them).
        started = time.perf_counter()
        await asyncio.gather(*(spark(batch, context) for batch, context in handed_over))
        timings.append(time.perf_counter() - started)
    if spark.batch_id != repeats + 1:
        raise errors.TransientError(f"expected one trigger per round, got {spark.batch_id}")
    warm = sorted(timings[1:])
    return 1000 * warm[len(warm) // 2]
