"""How many owner-checked checkpoint updates per second the store sustains on Azurite.

Every update is one conditional metadata write (If-Match on the last ETag), so the figure is
the round trip of one blob request through the SDK. Updates of one partition are sequential
by nature (each needs the previous ETag); partitions are independent, so 32 of them run
concurrently as 32 consumer tasks would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from pathlib import Path

from eventhub_balancer.adapters import blobs, checkpointing
from eventhub_balancer_devstack import azurite


@dataclasses.dataclass(frozen=True)
class Figures:
    updates_per_s_1_partition: float
    #: With ``partitions`` partitions updated concurrently (32 by default).
    updates_per_s_many_partitions: float
    partitions: int
    updates_1_partition: int
    updates_many_partitions: int


async def _updates_per_second(
    store: checkpointing.CheckpointStore, *, partitions: int, updates: int
) -> float:
    names = [str(p) for p in range(partitions)]
    for name in names:
        await store.fence(name, 1)
    per_partition = max(1, updates // partitions)

    async def drive(partition: str) -> None:
        for n in range(per_partition):
            await store.update(partition, offset=str(n * 100), sequence_number=n)

    started = time.perf_counter()
    await asyncio.gather(*(drive(name) for name in names))
    elapsed = time.perf_counter() - started
    return per_partition * partitions / elapsed


async def measure(
    *, connection_string: str, updates: int = 2000, partitions: int = 32, warmup: int = 100
) -> Figures:
    """Measure against the blob service behind ``connection_string`` (a fresh container)."""
    container_name = f"bench-{uuid.uuid4().hex[:12]}"
    async with blobs.open_container(
        container_name=container_name, connection_string=connection_string
    ) as container:
        await blobs.ensure_container(container)
        try:

            def store(hub: str) -> checkpointing.CheckpointStore:
                return checkpointing.CheckpointStore(
                    container,
                    fully_qualified_namespace="bench.servicebus.windows.net",
                    eventhub_name=hub,
                    consumer_group="$default",
                    owner_id="bench",
                )

            # Warm the connection pool and Azurite's code paths first.
            await _updates_per_second(store("warmup"), partitions=1, updates=warmup)
            one = await _updates_per_second(store("one"), partitions=1, updates=updates)
            many = await _updates_per_second(store("many"), partitions=partitions, updates=updates)
        finally:
            await container.delete_container()
    return Figures(
        updates_per_s_1_partition=round(one, 1),
        updates_per_s_many_partitions=round(many, 1),
        partitions=partitions,
        updates_1_partition=updates,
        updates_many_partitions=max(1, updates // partitions) * partitions,
    )


def run_on_local_azurite(
    *, updates: int = 2000, partitions: int = 32, node_modules: Path | None = None
) -> Figures:
    """Start a private in-memory Azurite, measure, stop it."""
    with azurite.Azurite(
        node_modules=node_modules or azurite.REPOSITORY / "node_modules"
    ) as service:
        return asyncio.run(
            measure(
                connection_string=service.connection_string,
                updates=updates,
                partitions=partitions,
            )
        )
