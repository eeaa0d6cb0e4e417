"""Fakes and fixtures for the consumer runtime: an in-memory checkpoint store and event stream.

The partition core's rules (checkpoint after the handler, release order, retries, ownership
loss) are tested against these fakes in milliseconds; the integration tests run the same
runtime against the Event Hubs emulator and Azurite.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import receiving
from eventhub_balancer.consumer import assignments, connections, partitions

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True)
class FakeCheckpoint:
    sequence_number: int
    offset: str
    epoch: int
    owner_id: str


class FakeStore:
    """Owner-checked like the real store: a higher epoch fences, updates need the epoch."""

    def __init__(self) -> None:
        self.blobs: dict[str, FakeCheckpoint] = {}
        self.history: dict[str, list[int]] = {}
        self.fenced: dict[tuple[str, str], int] = {}  # (owner, partition) -> epoch

    def handle(self, owner: str) -> FakeStoreHandle:
        return FakeStoreHandle(self, owner)


class FakeStoreHandle:
    def __init__(self, store: FakeStore, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.fail_updates = 0
        #: While set and not open, every update waits for it (a slow checkpoint write).
        self.gate: asyncio.Event | None = None
        #: Updates begun (counted before the gate), to see a write in flight.
        self.updates_begun = 0

    async def fence(self, partition: str, epoch: int, *, start: Any) -> FakeCheckpoint:
        current = self.store.blobs.get(partition)
        if current is not None and current.epoch > epoch:
            raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
        seq = -1 if current is None else current.sequence_number
        offset = "-1" if current is None else current.offset
        taken = FakeCheckpoint(seq, offset, epoch, self.owner)
        self.store.blobs[partition] = taken
        self.store.fenced[(self.owner, partition)] = epoch
        return taken

    async def update(self, partition: str, *, offset: str, sequence_number: int) -> FakeCheckpoint:
        self.updates_begun += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_updates:
            self.fail_updates -= 1
            raise errors.CheckpointStoreUnreachable("injected")
        epoch = self.store.fenced[(self.owner, partition)]
        current = self.store.blobs[partition]
        if current.epoch > epoch:
            raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
        assert sequence_number >= current.sequence_number, "checkpoint moved backwards"
        written = FakeCheckpoint(sequence_number, offset, epoch, self.owner)
        self.store.blobs[partition] = written
        self.store.history.setdefault(partition, []).append(sequence_number)
        return written

    def release(self, partition: str) -> None:
        self.store.fenced.pop((self.owner, partition), None)


class FakeHub:
    """Partitions of events; receivers with owner levels, and a stolen link on a newer one."""

    def __init__(self) -> None:
        self.events: dict[str, list[receiving.Event]] = {}
        self.owner_levels: dict[str, int] = {}
        self.receivers: list[FakeReceiver] = []

    def append(self, partition: str, count: int, *, key: str = "k") -> None:
        stream = self.events.setdefault(partition, [])
        for _ in range(count):
            n = len(stream)
            stream.append(
                receiving.Event(
                    partition=partition,
                    sequence_number=n,
                    offset=str(n * 10),
                    enqueued_time=T0 + datetime.timedelta(seconds=n),
                    partition_key=key,
                    properties={"n": n},
                    body=f"{partition}:{n}".encode(),
                )
            )

    def open(self, partition: str, epoch: int, position: receiving.Position) -> FakeReceiver:
        receiver = FakeReceiver(self, partition, epoch, position)
        self.receivers.append(receiver)
        return receiver


class FakeReceiver:
    def __init__(
        self, hub: FakeHub, partition: str, epoch: int, position: receiving.Position
    ) -> None:
        assert position.sequence_number is not None
        assert not position.inclusive
        self.hub = hub
        self.partition = partition
        self.epoch = epoch
        self.next = position.sequence_number + 1
        self.closed = False
        self.last_enqueued: receiving.LastEnqueued | None = None

    def start(self) -> None:
        current = self.hub.owner_levels.get(self.partition, 0)
        self.hub.owner_levels[self.partition] = max(current, self.epoch)

    async def next_batch(self, *, max_size: int, max_wait: float) -> receiving.ReceivedBatch:
        assert not self.closed
        for _ in range(int(max_wait / 0.01) + 1):
            if self.hub.owner_levels.get(self.partition, 0) > self.epoch:
                raise errors.OwnershipLost(self.partition, self.epoch, self.epoch + 1)
            stream = self.hub.events.get(self.partition, [])
            if len(stream) > self.next:
                break
            await asyncio.sleep(0.01)
        stream = self.hub.events.get(self.partition, [])
        events = stream[self.next : self.next + max_size]
        self.next += len(events)
        if stream:
            last = stream[-1]
            self.last_enqueued = receiving.LastEnqueued(
                last.sequence_number, last.offset, last.enqueued_time, None
            )
        return receiving.ReceivedBatch(events=events, last_enqueued=self.last_enqueued)

    async def close(self) -> None:
        self.closed = True


class Recorder:
    """A handler that records every event it finished, and can be told to fail or block."""

    def __init__(self) -> None:
        self.done: list[tuple[str, int]] = []
        self.calls = 0
        self.fail_next = 0
        self.block: asyncio.Event | None = None
        self.contexts: list[Any] = []

    async def __call__(self, events: Any, context: Any) -> None:
        self.calls += 1
        self.contexts.append(context)
        if self.block is not None:
            await self.block.wait()
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("handler failure (injected)")
        self.done.extend((e.partition, e.sequence_number) for e in events)


def fake_backends(hub: FakeHub, store: FakeStoreHandle) -> connections.BackendFactory:
    @contextlib.asynccontextmanager
    async def factory(assignment: assignments.Assignment) -> AsyncIterator[connections.Backend]:
        async def resolve(partition: str) -> Any:
            return None

        yield connections.Backend(store=store, open_receiver=hub.open, resolve_start=resolve)

    return factory


def configmap(
    generation: int, partitions_: Mapping[str, tuple[int, str]], **extra: str
) -> dict[str, Any]:
    """ConfigMap-shaped assignment: {partition: (epoch, state)}."""
    import json

    data = {
        "consumer": "orders",
        "pod": "pod-a",
        "fullyQualifiedNamespace": "local.servicebus.windows.net",
        "eventHubName": "orders",
        "consumerGroup": "$Default",
        "checkpointContainer": "checkpoints",
        "startPosition": json.dumps("earliest"),
        "generation": str(generation),
        "partitions": json.dumps(
            {p: {"epoch": e, "state": s} for p, (e, s) in partitions_.items()}
        ),
    }
    data.update(extra)
    return {"metadata": {"name": "ehb-orders-pod-a"}, "data": data}


async def eventually(check: Callable[[], bool], *, within: float = 10.0, what: str = "") -> None:
    """Poll ``check`` until true; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what or check}")
        await asyncio.sleep(0.02)


@pytest.fixture
def fake_hub() -> FakeHub:
    return FakeHub()


@pytest.fixture
def fake_store() -> FakeStore:
    return FakeStore()


# --- the local stack for the runtime: the Event Hubs emulator, events, real backends ---


@pytest.fixture
def consumer_emulator() -> Any:
    """An Event Hubs emulator with hub ``orders`` (4 partitions) in a thread, for one test."""
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

    emulator = EventHubsEmulator(hubs={"orders": 4, "big": 16})
    with emulator.running_in_thread():
        yield emulator


async def send_events(
    connection_string: str, hub: str, counts: Mapping[str, int], *, chunk: int = 500
) -> None:
    """Send ``counts[partition]`` events of about 100 bytes to each partition."""
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(connection_string, eventhub_name=hub)
    async with producer:
        for partition, count in counts.items():
            sent = 0
            while sent < count:
                batch = await producer.create_batch(partition_id=partition)
                for n in range(sent, min(count, sent + chunk)):
                    event = EventData(f"{partition}:{n}:".encode() + b"x" * 90)
                    event.properties = {"n": n}
                    batch.add(event)
                sent += len(batch)
                await producer.send_batch(batch)


def azure_backends(
    *,
    eventhub_connection_string: str,
    blob_connection_string: str,
    owner: str,
    batch: partitions.BatchSettings,
) -> connections.AzureBackends:
    return connections.AzureBackends(
        credentials=connections.Credentials(
            eventhub_connection_string=eventhub_connection_string,
            blob_connection_string=blob_connection_string,
        ),
        owner_id=owner,
        batch=batch,
    )
