"""In-memory fakes of the consumer runtime's ports, for tests on fake loop time (looptime).

The assignment source is the product's own ``assignments.MemorySource``; these stand in for
the rest: the checkpoint store (owner-checked like the real one), the Event Hub (partitions
of events, owner levels, stolen links) with receivers that cut their batches with the real
``adapters.batching.EventBuffer``, and a handler that records what it finished. Nothing here
sleeps in real time: every wait is on the event loop's clock, so under
``@pytest.mark.looptime`` a test of a 20-second release timeout takes milliseconds, and the
same fakes still work in real time (the endpoint test serves real HTTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import batching, deliveries
from eventhub_balancer.consumer import assignments, connections, contexts
from eventhub_balancer.contracts import checkpointblobs

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def loop_time() -> float:
    return asyncio.get_running_loop().time()


@dataclasses.dataclass(frozen=True)
class FakeCheckpoint:
    sequence_number: int
    offset: str
    epoch: int
    owner_id: str
    deaths: checkpointblobs.Deaths | None = None


class FakeStore:
    """Owner-checked like the real store: a higher epoch fences, updates need the epoch."""

    def __init__(self) -> None:
        self.blobs: dict[str, FakeCheckpoint] = {}
        self.history: dict[str, list[int]] = {}
        self.fenced: dict[tuple[str, str], int] = {}  # (owner, partition) -> epoch
        #: Every write of a deaths record, in order.
        self.deaths_written: list[tuple[str, checkpointblobs.Deaths | None]] = []

    def handle(self, owner: str) -> FakeStoreHandle:
        return FakeStoreHandle(self, owner)


class FakeStoreHandle:
    """One owner's view of the store, with injectable failures and slow writes."""

    def __init__(self, store: FakeStore, owner: str) -> None:
        self.store = store
        self.owner = owner
        #: So many next fences (updates) fail as if Blob Storage were unreachable.
        self.fail_fences = 0
        self.fail_updates = 0
        #: While set and not open, every update waits for it (a slow checkpoint write).
        self.gate: asyncio.Event | None = None
        #: Updates begun (counted before the gate), to see a write in flight.
        self.updates_begun = 0
        #: Loop time of every fence attempt, failed ones included (restart backoff).
        self.fence_times: list[float] = []

    async def fence(self, partition: str, epoch: int, *, start: Any) -> FakeCheckpoint:
        self.fence_times.append(loop_time())
        if self.fail_fences:
            self.fail_fences -= 1
            raise errors.CheckpointStoreUnreachable("injected")
        current = self.store.blobs.get(partition)
        if current is not None and current.epoch > epoch:
            raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
        seq = -1 if current is None else current.sequence_number
        offset = "-1" if current is None else current.offset
        deaths = None if current is None else current.deaths
        taken = FakeCheckpoint(seq, offset, epoch, self.owner, deaths)
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
        deaths = current.deaths
        if deaths is not None and deaths.passed_by(sequence_number):
            deaths = None
        written = FakeCheckpoint(sequence_number, offset, epoch, self.owner, deaths)
        self.store.blobs[partition] = written
        self.store.history.setdefault(partition, []).append(sequence_number)
        return written

    async def keep(self, partition: str) -> FakeCheckpoint | None:
        """The stored checkpoint, if we fenced it (this fake's blobs are never deleted)."""
        if (self.owner, partition) not in self.store.fenced:
            return None
        return self.store.blobs.get(partition)

    async def record_deaths(
        self, partition: str, deaths: checkpointblobs.Deaths | None
    ) -> FakeCheckpoint:
        """``deaths`` beside the checkpoint, which stays; owner-checked as `update`."""
        epoch = self.store.fenced[(self.owner, partition)]
        current = self.store.blobs[partition]
        if current.epoch > epoch:
            raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
        written = dataclasses.replace(current, deaths=deaths)
        self.store.blobs[partition] = written
        self.store.deaths_written.append((partition, deaths))
        return written

    def release(self, partition: str) -> None:
        self.store.fenced.pop((self.owner, partition), None)


class FakeHub:
    """Partitions of events, and receivers with owner levels: a higher one steals the link."""

    def __init__(self) -> None:
        self.events: dict[str, list[deliveries.ReceivedEvent]] = {}
        self.owner_levels: dict[str, int] = {}
        self.receivers: list[FakeReceiver] = []
        #: While set, every receiver fails with it as it starts (no such hub or consumer group,
        #: or an Event Hubs that cannot be reached).
        self.missing: errors.EventHubNotFound | errors.EventHubUnreachable | None = None

    def append(self, partition: str, count: int, *, key: str = "k") -> None:
        """Enqueue ``count`` events; open receivers of the partition get them at once."""
        stream = self.events.setdefault(partition, [])
        for _ in range(count):
            n = len(stream)
            stream.append(
                deliveries.ReceivedEvent(
                    partition=partition,
                    sequence_number=n,
                    offset=str(n * 10),
                    enqueued_time=T0 + datetime.timedelta(seconds=n),
                    partition_key=key,
                    properties={"n": n},
                    body=f"{partition}:{n}".encode(),
                )
            )
        for receiver in self.receivers:
            if receiver.partition == partition:
                receiver.deliver()

    def claim(self, partition: str, epoch: int) -> None:
        """A receiver with owner level ``epoch`` opens: every lower one loses its link."""
        self.owner_levels[partition] = max(self.owner_levels.get(partition, 0), epoch)
        for receiver in self.receivers:
            if receiver.partition == partition and receiver.epoch < epoch:
                receiver.steal(epoch)

    def fail(self, partition: str) -> None:
        """Every open receiver of the partition gives up (Event Hubs unreachable)."""
        for receiver in self.receivers:
            if receiver.partition == partition:
                receiver.buffer.fail(errors.EventHubUnreachable(f"partition {partition}: injected"))

    def open(
        self, partition: str, epoch: int, position: deliveries.ReceivePosition
    ) -> FakeReceiver:
        receiver = FakeReceiver(self, partition, epoch, position)
        self.receivers.append(receiver)
        return receiver


class FakeReceiver:
    """A partition receiver whose link is the hub: events buffer as the hub gets them."""

    def __init__(
        self, hub: FakeHub, partition: str, epoch: int, position: deliveries.ReceivePosition
    ) -> None:
        assert position.sequence_number is not None
        assert not position.inclusive
        self.hub = hub
        self.partition = partition
        self.epoch = epoch
        #: The next sequence number to buffer, and the last one handed out.
        self.next = position.sequence_number + 1
        self.handed_out = position.sequence_number
        self.buffer = batching.EventBuffer(limit=10_000)
        self.started = False
        self.closed = False
        #: Its link opened (it started, and the hub did not refuse or steal it).
        self.linked = False
        self.last_enqueued: deliveries.LastEnqueued | None = None

    def start(self) -> None:
        self.started = True
        if self.hub.missing is not None:
            self.buffer.fail(self.hub.missing)
            return
        if self.hub.owner_levels.get(self.partition, 0) > self.epoch:
            self.steal(self.hub.owner_levels[self.partition])
            return
        self.hub.claim(self.partition, self.epoch)
        self.linked = True
        self.deliver()

    def deliver(self) -> None:
        if not self.started or self.closed:
            return
        stream = self.hub.events.get(self.partition, [])
        if len(stream) > self.next:
            last = stream[-1]
            self.last_enqueued = deliveries.LastEnqueued(
                last.sequence_number, last.offset, last.enqueued_time, None
            )
            self.buffer.add(stream[self.next :])
            self.next = len(stream)

    def steal(self, epoch: int) -> None:
        lost = errors.OwnershipLost(self.partition, self.epoch, epoch, "a newer receiver")
        self.buffer.fail(lost)

    async def next_batch(self, *, max_size: int, max_wait: float) -> deliveries.ReceivedBatch:
        assert not self.closed
        events = await self.buffer.take(max_size=max_size, max_wait=max_wait)
        if events:
            self.handed_out = events[-1].sequence_number
        return deliveries.ReceivedBatch(
            events=events, last_enqueued=self.last_enqueued, linked=self.linked
        )

    async def close(self) -> None:
        self.closed = True
        self.buffer.close()


class Recorder:
    """A handler that records every event it finished, and can be told to fail, block or
    take its time (on the loop's clock)."""

    def __init__(self) -> None:
        self.done: list[tuple[str, int]] = []
        self.calls = 0
        self.fail_next = 0
        self.block: asyncio.Event | None = None
        #: Seconds each call takes (fake time under looptime).
        self.duration = 0.0
        self.contexts: list[contexts.BatchContext] = []
        #: (loop time the call began, batch size) of every call.
        self.starts: list[tuple[float, int]] = []

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        self.calls += 1
        self.contexts.append(context)
        self.starts.append((loop_time(), len(events)))
        if self.duration:
            await asyncio.sleep(self.duration)
        if self.block is not None:
            await self.block.wait()
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("handler failure (injected)")
        self.done.extend((e.partition, e.sequence_number) for e in events)


async def resolve_nothing(partition: str) -> Any:
    return None


def fake_backends(hub: FakeHub, store: FakeStoreHandle) -> connections.BackendFactory:
    @contextlib.asynccontextmanager
    async def factory(assignment: assignments.Assignment) -> AsyncIterator[connections.Backend]:
        yield connections.Backend(
            store=store, open_receiver=hub.open, resolve_start=resolve_nothing
        )

    return factory


def configmap(
    generation: int, partitions_: Mapping[str, tuple[int, str]], **extra: str
) -> dict[str, Any]:
    """ConfigMap-shaped assignment: {partition: (epoch, state)}."""
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
    """Poll ``check`` until true; fail after ``within`` seconds of the loop's clock (fake
    seconds under looptime, real ones on the local stack)."""
    deadline = loop_time() + within
    while not check():
        if loop_time() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what or check}")
        await asyncio.sleep(0.02)
