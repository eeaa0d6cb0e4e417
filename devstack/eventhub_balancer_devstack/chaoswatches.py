"""What the chaos run (`chaos`) watches besides the pods: the checkpoint blobs, sampled for
regressions and conflicting writers (`CheckpointWatch`), and the dead-lettered events, read
back and accounted for against what was produced (`read_deadletters`, `account`), and the
poison batches a partition has still to pass, with what their retries cost
(`poison_ahead`, `poison_retries_s`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from eventhub_balancer import runners
from eventhub_balancer.adapters import blobs, checkpointing
from eventhub_balancer.consumer import batchsettings
from eventhub_balancer_devstack.scenarios import systems

logger = logging.getLogger(__name__)

#: How often the checkpoint blobs are read for the invariants.
SAMPLE_S = 0.2
# -- dead letters


def deadletter_prefix(*, hub: str, consumer_group: str) -> str:
    """Where a pod dead-letters batches, next to the checkpoints (lower-cased, as they are)."""
    return f"{systems.FULLY_QUALIFIED_NAMESPACE}/{hub}/{consumer_group}/deadletter/".lower()


def parse_deadletter(data: bytes) -> list[tuple[str, int]]:
    """The ``(partition, sequence number)`` of each event in a dead-letter blob.

    Raises ValueError when the blob is not JSON with an ``events`` list of objects with a
    ``partition`` and an integer ``sequenceNumber``.
    """
    body = json.loads(data)
    events = body.get("events") if isinstance(body, dict) else None
    if not isinstance(events, list):
        raise ValueError("no 'events' list")
    result = []
    for event in events:
        if not isinstance(event, dict):
            raise ValueError(f"an event is not an object: {event!r:.80}")
        partition, sequence = event.get("partition"), event.get("sequenceNumber")
        if partition is None or isinstance(sequence, bool) or not isinstance(sequence, int):
            raise ValueError(f"an event without partition and sequenceNumber: {event!r:.80}")
        result.append((str(partition), sequence))
    return result


def account(
    missing: Iterable[tuple[str, int]], dead_lettered: Iterable[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The events still lost once the dead-lettered ones count as accounted for."""
    accounted = set(dead_lettered)
    return [event for event in missing if event not in accounted]


def progressing(
    targets: Mapping[str, int],
    *,
    checkpoints: Mapping[str, int],
    processed: Mapping[str, int],
) -> bool:
    """Every partition took up its work again: its checkpoint (sequence number) or the
    highest sequence number processed is at or past ``targets[partition]`` (the last event
    produced before the faults ended; -1 when there was none)."""
    return all(
        target < 0 or max(checkpoints.get(p, -1), processed.get(p, -1)) >= target
        for p, target in targets.items()
    )


# -- the checkpoint watch


class CheckpointWatch:
    """Samples every checkpoint blob of every location the run used, on the scenario's loop,
    and keeps the violations. `follow` adds a location (after a spec change)."""

    def __init__(self, *, site: systems.Site) -> None:
        self.site = site
        self.regressions: list[str] = []
        self.conflicts: list[str] = []
        self.samples = 0
        self.containers = [site.container]
        #: (container, partition) -> (sequence number, epoch, owner) last seen.
        self.last: dict[tuple[str, str], tuple[int, int, str]] = {}
        self._owners: dict[tuple[str, str, int], str] = {}
        self._stop = asyncio.Event()
        self._done: Any = None

    @property
    def current(self) -> str:
        return self.containers[-1]

    def follow(self, container: str) -> None:
        self.containers = [*self.containers, container]

    def positions(self) -> dict[str, int]:
        """partition -> checkpoint sequence number in the current location."""
        current = self.current
        return {p: last[0] for (c, p), last in self.last.items() if c == current}

    def start(self, loop: runners.BackgroundLoop) -> None:
        self._done = loop.submit(self._run())

    def stop(self, loop: runners.BackgroundLoop) -> None:
        loop.call_soon(self._stop.set)
        done = self._done
        if done is not None:
            with contextlib.suppress(Exception):
                done.result(timeout=10)

    def check(self, checkpoints: list[checkpointing.Checkpoint], *, container: str = "") -> None:
        container = container or self.site.container
        for cp in checkpoints:
            where = f"{container}: partition {cp.partition}"
            before = self.last.get((container, cp.partition))
            if before is not None:
                sequence, epoch, owner = before
                if cp.sequence_number < sequence:
                    self.regressions.append(f"{where}: sequence {sequence} -> {cp.sequence_number}")
                if cp.epoch < epoch:
                    self.conflicts.append(
                        f"{where}: epoch {epoch} ({owner}) -> {cp.epoch} ({cp.owner_id})"
                    )
            known = self._owners.setdefault((container, cp.partition, cp.epoch), cp.owner_id)
            if known != cp.owner_id:
                self.conflicts.append(
                    f"{where}: epoch {cp.epoch} written by {known} and {cp.owner_id}"
                )
            self.last[(container, cp.partition)] = (cp.sequence_number, cp.epoch, cp.owner_id)

    async def _run(self) -> None:
        stores: dict[str, checkpointing.CheckpointStore] = {}
        async with contextlib.AsyncExitStack() as opened:
            while not self._stop.is_set():
                for container in list(self.containers):
                    try:
                        if container not in stores:
                            stores[container] = await self._open(opened, container)
                        checkpoints = await stores[container].list()
                    except Exception as e:  # Azurite itself is never faulted; log and go on
                        logger.warning("checkpoint sample of %s failed: %s", container, e)
                        continue
                    self.check(checkpoints, container=container)
                self.samples += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=SAMPLE_S)

    async def _open(
        self, opened: contextlib.AsyncExitStack, container_name: str
    ) -> checkpointing.CheckpointStore:
        container = await opened.enter_async_context(
            blobs.open_container(
                container_name=container_name,
                connection_string=self.site.stack.blob_connection_string,
            )
        )
        return checkpointing.CheckpointStore(
            container,
            fully_qualified_namespace=systems.FULLY_QUALIFIED_NAMESPACE,
            eventhub_name=self.site.hub,
            consumer_group=systems.CONSUMER_GROUP,
            owner_id="chaos-watch",
        )


async def read_deadletters(
    *, connection_string: str, containers: Iterable[str], prefix: str
) -> tuple[list[tuple[str, int]], list[str]]:
    """Every dead-lettered event in ``containers`` under ``prefix``, and the unreadable blobs."""
    events: list[tuple[str, int]] = []
    unreadable: list[str] = []
    for name in containers:
        async with blobs.open_container(
            container_name=name, connection_string=connection_string
        ) as container:
            async for item in container.list_blobs(name_starts_with=prefix):
                data = await (await container.download_blob(item.name)).readall()
                try:
                    events.extend(parse_deadletter(data))
                except ValueError as e:
                    unreadable.append(f"{name}/{item.name}: {e}")
    return events, unreadable


async def deadletter_batches(
    *, connection_string: str, container: str, prefix: str
) -> dict[str, int]:
    """How many batches each partition dead-lettered in ``container``: one blob a batch,
    named ``<prefix><partition>/<first>-<last>.json``."""
    counts: dict[str, int] = {}
    async with blobs.open_container(
        container_name=container, connection_string=connection_string
    ) as client:
        async for item in client.list_blobs(name_starts_with=prefix):
            partition = item.name[len(prefix) :].split("/", 1)[0]
            counts[partition] = counts.get(partition, 0) + 1
    return counts


def poison_ahead(poisoned: Mapping[str, int], dead_lettered: Mapping[str, int]) -> int:
    """The most poison batches one partition has still to pass through: the poison events
    sent to it less the batches it dead-lettered in the current location. A batch with two
    poison events counts twice (an over-estimate, never under)."""
    return max((max(0, sent - dead_lettered.get(p, 0)) for p, sent in poisoned.items()), default=0)


#: The failure policy of the chaos run's CR: a poison batch is dead-lettered after this many
#: attempts.
MAX_ATTEMPTS = 3


def poison_retries_s() -> float:
    """The backoff a poison batch waits through before it is dead-lettered: the waits between
    the chaos CR's `MAX_ATTEMPTS` tries, at the pods' default backoff (doubling, capped)."""
    defaults = batchsettings.BatchSettings()
    waits = (
        min(defaults.retry_backoff * 2**attempt, defaults.retry_backoff_max)
        for attempt in range(MAX_ATTEMPTS - 1)
    )
    return float(sum(waits))
