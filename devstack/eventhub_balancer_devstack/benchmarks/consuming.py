"""What the consumer runtime costs over the bare SDK, and what a Spark micro-batch costs.

Two drains of the same backlog from the same emulator, in the same run:

- *raw SDK*: ``EventHubConsumerClient.receive_batch`` (the public API), one client and task
  per partition, a callback that only counts: the ceiling for any consumer on this machine;
- *runtime*: the consumer runtime with a no-op handler: fencing, owner-level receivers,
  micro-batching, and an owner-checked checkpoint on Azurite after every batch (the next
  batch's handler waits for it: the one-batch crash bound).

Both sides use the runtime's defaults (batch size and max wait, ``partitions.BatchSettings``)
unless told otherwise. In a backlog every batch is full, except a partition's last one when
its events are not a multiple of the batch size: that batch waits ``max_wait`` for events that
never come, which is latency at the end of a finite backlog, not throughput. The default
backlog (5,000 events per partition) is a multiple of the default batch size (500).

The emulator runs in a child process so that its work does not share our interpreter's GIL
with the consumer being measured. Rounds alternate (raw, runtime, raw, runtime...) and the
best round of each counts, which cancels out most of the noise of a shared machine.
The Spark figure is the time ``process(df, context)`` of the example pipeline takes per
micro-batch (DataFrame from Arrow, an aggregation, a Parquet write) once the session is warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import importlib
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs, deliveries
from eventhub_balancer.consumer import (
    assignments,
    connections,
    contexts,
    partitions,
    processing,
    runtime,
)
from eventhub_balancer_devstack import azurite
from eventhub_balancer_devstack.benchmarks import emulator

logger = logging.getLogger(__name__)

HUB = "bench"
#: A drain that takes longer than this has hung: the benchmark fails rather than waits.
DRAIN_TIMEOUT_S = 300.0
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@dataclasses.dataclass(frozen=True)
class Figures:
    runtime_events_per_s: float
    raw_sdk_events_per_s: float
    ratio: float
    spark_batch_ms_1k: float | None
    spark_batch_ms_10k: float | None
    events: int
    partitions: int
    rounds: int
    batch_size: int
    max_wait: float


async def fill(connection_string: str, *, partitions_: int, per_partition: int) -> None:
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(connection_string, eventhub_name=HUB)
    async with producer:
        for partition in range(partitions_):
            sent = 0
            while sent < per_partition:
                batch = await producer.create_batch(partition_id=str(partition))
                for _ in range(min(1000, per_partition - sent)):
                    batch.add(EventData(b"x" * 100))
                sent += len(batch)
                await producer.send_batch(batch)


async def raw_sdk_drain(
    connection_string: str, *, partitions_: int, events: int, batch_size: int
) -> float:
    """Events per second of the bare SDK draining the backlog."""
    from azure.eventhub.aio import EventHubConsumerClient

    received = 0
    done = asyncio.Event()

    async def on_batch(context: Any, batch: list[Any]) -> None:
        nonlocal received
        received += len(batch)
        if received >= events:
            done.set()

    clients = [
        EventHubConsumerClient.from_connection_string(
            connection_string, "$Default", eventhub_name=HUB, load_balancing_interval=1.0
        )
        for _ in range(partitions_)
    ]
    started = time.perf_counter()
    tasks = [
        asyncio.create_task(
            client.receive_batch(
                on_batch,
                partition_id=str(p),
                starting_position="-1",
                max_batch_size=batch_size,
                prefetch=300,
            )
        )
        for p, client in enumerate(clients)
    ]
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            await done.wait()
        elapsed = time.perf_counter() - started
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return received / elapsed


async def _noop(events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext) -> None:
    return None


@contextlib.asynccontextmanager
async def _container(blob_connection_string: str) -> AsyncIterator[str]:
    name = f"bench-{uuid.uuid4().hex[:16]}"
    async with blobs.open_container(
        container_name=name, connection_string=blob_connection_string
    ) as c:
        await blobs.ensure_container(c)
        try:
            yield name
        finally:
            with contextlib.suppress(Exception):
                await c.delete_container()


async def runtime_drain(
    connection_string: str,
    blob_connection_string: str,
    *,
    partitions_: int,
    events: int,
    batch_size: int,
    max_wait: float,
) -> float:
    """Events per second of the consumer runtime (no-op handler) draining the backlog."""
    import json

    batch = partitions.BatchSettings(batch_size=batch_size, max_wait=max_wait)
    async with _container(blob_connection_string) as container:
        source = assignments.MemorySource()
        consumer = runtime.Runtime(
            settings=runtime.RuntimeSettings(consumer="bench", pod="bench-pod", batch=batch),
            source=source,
            backends=connections.AzureBackends(
                credentials=connections.Credentials(
                    eventhub_connection_string=connection_string,
                    blob_connection_string=blob_connection_string,
                ),
                owner_id="bench-pod",
                batch=batch,
            ),
            processor=processing.PlainProcessor(_noop),
        )
        run = asyncio.create_task(consumer.run())
        started = time.perf_counter()
        source.put(
            {
                "data": {
                    "fullyQualifiedNamespace": f"bench-{uuid.uuid4().hex[:8]}.local",
                    "eventHubName": HUB,
                    "consumerGroup": "$Default",
                    "checkpointContainer": container,
                    "startPosition": json.dumps("earliest"),
                    "generation": "1",
                    "partitions": json.dumps(
                        {str(p): {"epoch": 1, "state": "owned"} for p in range(partitions_)}
                    ),
                }
            }
        )
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT_S):
                while sum(s.events for s in consumer.stats.values()) < events:
                    if run.done():
                        run.result()
                        raise errors.TransientError("the runtime stopped during the benchmark")
                    await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - started
        finally:
            consumer.request_shutdown()
            await asyncio.gather(run, return_exceptions=True)
        return events / elapsed


def spark_batch_ms(sizes: Sequence[int], *, repeats: int = 5) -> dict[int, float]:
    """Median milliseconds per micro-batch of the example pipeline, by batch size."""
    from eventhub_balancer.spark import frames, sessions

    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    pipeline = importlib.import_module("minute_counts.pipeline")

    session = sessions.build_session(app_name="ehb-bench")
    results: dict[int, float] = {}
    now = datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory(prefix="ehb-bench-spark-") as root:
        os.environ[pipeline.OUTPUT_ENV] = root
        for size in sizes:
            events = [
                deliveries.ReceivedEvent(
                    partition="0",
                    sequence_number=n,
                    offset=str(n * 128),
                    enqueued_time=now + datetime.timedelta(milliseconds=n),
                    partition_key=f"key-{n % 50}",
                    properties={"n": n},
                    body=b"x" * 100,
                )
                for n in range(size)
            ]
            timings = []
            for attempt in range(repeats + 1):  # the first one warms the session up
                context = contexts.BatchContext(
                    partition="0",
                    epoch=attempt + 1,
                    consumer="bench",
                    pod="bench-pod",
                    first_sequence_number=0,
                    last_sequence_number=size - 1,
                    size=size,
                    spark=session,
                )
                started = time.perf_counter()
                pipeline.process(frames.to_dataframe(session, events), context)
                timings.append(time.perf_counter() - started)
            warm = sorted(timings[1:])
            results[size] = 1000 * warm[len(warm) // 2]
    session.stop()
    return results


async def _measure_drains(
    *, partitions_: int, events: int, rounds: int, batch_size: int, max_wait: float
) -> tuple[float, float]:
    per_partition = events // partitions_
    total = per_partition * partitions_
    raw: list[float] = []
    ours: list[float] = []
    with (
        azurite.Azurite() as blob_service,
        emulator.emulator_process(hub=HUB, partitions=partitions_) as cs,
    ):
        await fill(cs, partitions_=partitions_, per_partition=per_partition)
        for _ in range(rounds):
            raw.append(
                await raw_sdk_drain(
                    cs, partitions_=partitions_, events=total, batch_size=batch_size
                )
            )
            ours.append(
                await runtime_drain(
                    cs,
                    blob_service.connection_string,
                    partitions_=partitions_,
                    events=total,
                    batch_size=batch_size,
                    max_wait=max_wait,
                )
            )
    logger.info("raw SDK rounds: %s; runtime rounds: %s", raw, ours)
    return max(ours), max(raw)


def measure(
    *,
    partitions_: int = 4,
    events: int = 20_000,
    rounds: int = 2,
    batch_size: int | None = None,
    max_wait: float | None = None,
    spark: bool = True,
) -> Figures:
    """``batch_size`` / ``max_wait`` None: the runtime's defaults (``partitions.BatchSettings``)."""
    defaults = partitions.BatchSettings()
    batch_size = defaults.batch_size if batch_size is None else batch_size
    max_wait = defaults.max_wait if max_wait is None else max_wait
    if partitions_ < 1 or events < partitions_ or rounds < 1 or batch_size < 1 or max_wait <= 0:
        raise errors.InvalidInput(
            "bench",
            "need partitions >= 1, events >= partitions, rounds >= 1, batch size >= 1, "
            "max wait > 0",
        )
    ours, raw = asyncio.run(
        _measure_drains(
            partitions_=partitions_,
            events=events,
            rounds=rounds,
            batch_size=batch_size,
            max_wait=max_wait,
        )
    )
    spark_ms: dict[int, float] = spark_batch_ms([1_000, 10_000]) if spark else {}
    return Figures(
        runtime_events_per_s=round(ours, 1),
        raw_sdk_events_per_s=round(raw, 1),
        ratio=round(ours / raw, 3),
        spark_batch_ms_1k=round(spark_ms[1_000], 1) if spark_ms else None,
        spark_batch_ms_10k=round(spark_ms[10_000], 1) if spark_ms else None,
        events=(events // partitions_) * partitions_,
        partitions=partitions_,
        rounds=rounds,
        batch_size=batch_size,
        max_wait=max_wait,
    )
