"""What the consumer runtime costs over the bare SDK, and what Spark mode costs over it.

Three drains of the same backlog from the same emulator, in the same run:

- *raw SDK*: ``EventHubConsumerClient.receive_batch`` (the public API), one client and task
  per partition, a callback that only counts: the ceiling for any consumer on this machine;
- *runtime*: the consumer runtime with a no-op handler: fencing, owner-level receivers,
  micro-batching, and an owner-checked checkpoint on Azurite after every batch (the next
  batch's handler waits for it: the one-batch crash bound);
- *Spark*: the same runtime in Spark mode: the partitions' batches meet in pod-level triggers
  (``consumer.triggers``) on a ``local[2]`` session started beforehand, and each trigger's
  handler runs one job over every row (a count per partition).

The runtime and Spark drains are timed from the moment every partition's receiver is open
(the session's start is reported on its own: the receivers do not wait for it).
Every side uses the runtime's defaults (batch size and max wait, ``partitions.BatchSettings``)
unless told otherwise. In a backlog every batch is full, except a partition's last one when
its events are not a multiple of the batch size: that batch waits ``max_wait`` for events that
never come, which is latency at the end of a finite backlog, not throughput. The default
backlog (2,500 events per partition) is a multiple of the default batch size (500).

The emulator runs in a child process so that its work does not share our interpreter's GIL
with the consumer being measured. Rounds alternate (raw, runtime, Spark, raw...) and the
best round of each counts, which cancels out most of the noise of a shared machine.
The trigger overhead is a trigger of 1,000 events over 8 partitions on the warm session, from
the batches' hand-over to the calls' return, with the same counting handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs
from eventhub_balancer.consumer import (
    assignments,
    connections,
    contexts,
    crashmarkers,
    partitions,
    processing,
    runtime,
)
from eventhub_balancer_devstack import azurite
from eventhub_balancer_devstack.benchmarks import emulator, sparkdrains

logger = logging.getLogger(__name__)

HUB = "bench"
#: A drain that takes longer than this has hung: the benchmark fails rather than waits.
DRAIN_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class Figures:
    runtime_events_per_s: float
    raw_sdk_events_per_s: float
    ratio: float
    #: The Spark drain (pod-level triggers, a counting job per trigger) and its share of the
    #: runtime's plain drain.
    spark_events_per_s: float | None
    spark_ratio: float | None
    spark_trigger_overhead_ms: float | None
    spark_session_start_s: float | None
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
    processor: processing.BatchProcessor | None = None,
) -> float:
    """Events per second of the consumer runtime draining the backlog, from the moment every
    partition's receiver is open; ``processor`` None: a no-op plain handler."""
    import json

    batch = partitions.BatchSettings(batch_size=batch_size, max_wait=max_wait)
    async with (
        _container(blob_connection_string) as container,
        _marker_directory() as markers,
    ):
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
            processor=processor or processing.PlainProcessor(_noop),
            # As a pod runs it (`launching`): each handler call noted in a file.
            crash_markers=crashmarkers.CrashMarkers(markers, pod="bench-pod"),
        )
        run = asyncio.create_task(consumer.run())
        assigned = time.perf_counter()
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
        started: float | None = None
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT_S):
                while sum(s.events for s in consumer.stats.values()) < events:
                    if run.done():
                        run.result()
                        raise errors.TransientError("the runtime stopped during the benchmark")
                    if started is None and _receiving(consumer, partitions_):
                        started = time.perf_counter()
                    await asyncio.sleep(0.005)
            finished = time.perf_counter()
        finally:
            consumer.request_shutdown()
            await asyncio.gather(run, return_exceptions=True)
        # A drain so short that it ended before the last receiver was seen open counts from
        # the assignment.
        return events / (finished - (assigned if started is None else started))


@contextlib.asynccontextmanager
async def _marker_directory() -> AsyncIterator[Path]:
    """A crash marker directory of the drain's own, gone after it."""
    with tempfile.TemporaryDirectory(prefix="ehb-bench-markers-") as directory:
        yield Path(directory)


def _receiving(consumer: runtime.Runtime, partitions_: int) -> bool:
    """Every partition is fenced and its receiver open."""
    workers = list(consumer.workers.values())
    return len(workers) == partitions_ and all(w.fenced.is_set() for w in workers)


@dataclasses.dataclass
class _Drains:
    runtime: list[float] = dataclasses.field(default_factory=list)
    raw: list[float] = dataclasses.field(default_factory=list)
    spark: list[float] = dataclasses.field(default_factory=list)
    session_start_s: float | None = None
    trigger_ms: float | None = None


async def _measure_drains(
    *, partitions_: int, events: int, rounds: int, batch_size: int, max_wait: float, spark: bool
) -> _Drains:
    per_partition = events // partitions_
    total = per_partition * partitions_
    drains = _Drains()
    session = None
    if spark:
        session, drains.session_start_s = await asyncio.to_thread(sparkdrains.start_session)
    try:
        with (
            azurite.Azurite() as blob_service,
            emulator.emulator_process(hub=HUB, partitions=partitions_) as cs,
        ):
            await fill(cs, partitions_=partitions_, per_partition=per_partition)
            drain = functools.partial(
                runtime_drain,
                cs,
                blob_service.connection_string,
                partitions_=partitions_,
                events=total,
                batch_size=batch_size,
                max_wait=max_wait,
            )
            for _ in range(rounds):
                drains.raw.append(
                    await raw_sdk_drain(
                        cs, partitions_=partitions_, events=total, batch_size=batch_size
                    )
                )
                drains.runtime.append(await drain())
                if session is not None:
                    drains.spark.append(await drain(processor=sparkdrains.spark_triggers(session)))
        if session is not None:
            drains.trigger_ms = await sparkdrains.trigger_overhead_ms(session)
    finally:
        if session is not None:
            session.stop()
    logger.info(
        "raw SDK rounds: %s; runtime rounds: %s; Spark rounds: %s",
        drains.raw,
        drains.runtime,
        drains.spark,
    )
    return drains


def measure(
    *,
    partitions_: int = 8,
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
    drains = asyncio.run(
        _measure_drains(
            partitions_=partitions_,
            events=events,
            rounds=rounds,
            batch_size=batch_size,
            max_wait=max_wait,
            spark=spark,
        )
    )
    ours, raw = max(drains.runtime), max(drains.raw)
    best_spark = max(drains.spark) if drains.spark else None
    return Figures(
        runtime_events_per_s=round(ours, 1),
        raw_sdk_events_per_s=round(raw, 1),
        ratio=round(ours / raw, 3),
        spark_events_per_s=None if best_spark is None else round(best_spark, 1),
        spark_ratio=None if best_spark is None else round(best_spark / ours, 3),
        spark_trigger_overhead_ms=(
            None if drains.trigger_ms is None else round(drains.trigger_ms, 1)
        ),
        spark_session_start_s=(
            None if drains.session_start_s is None else round(drains.session_start_s, 2)
        ),
        events=(events // partitions_) * partitions_,
        partitions=partitions_,
        rounds=rounds,
        batch_size=batch_size,
        max_wait=max_wait,
    )
