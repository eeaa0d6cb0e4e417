"""A partition worker that ran ten times longer holds no more objects.

A pod runs for weeks: anything kept per event, per batch or per checkpoint (a cache keyed by
sequence numbers, a list of contexts, the SDK's per-delivery bookkeeping) grows until the
memory limit. Here one partition worker, with the real receive adapter
(``receiving.PartitionReceiver``) over the SDK's own AMQP receive link (its
``ReceiverLink``: the transfer decoding and the per-delivery bookkeeping where the soak
found the leak) fed by an in-memory wire, processes 200 batches, then 2,000; at both points
the same objects are alive: as many of the project's own types, as many of the SDK's events
(``EventData``) and AMQP messages, and as many objects reachable from the worker's task.
Objects are counted after a collection, never bytes or time (fake loop time: looptime).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import gc
import types
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub._pyamqp import message as amqp_message
from azure.eventhub._pyamqp._encode import encode_payload
from azure.eventhub._pyamqp.aio._receiver_async import ReceiverLink
from azure.eventhub._pyamqp.types import TYPE, VALUE, AMQPTypes

from eventhub_balancer.adapters import deliveries, receiving
from eventhub_balancer.consumer import contexts, metrics, partitions
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

PARTITION = "0"
BATCH = 10
SETTINGS = partitions.BatchSettings(batch_size=BATCH, max_wait=0.05)
ADDRESS = receiving.EventHubAddress(
    fully_qualified_namespace="local.servicebus.windows.net", eventhub_name="orders"
)
#: Objects of these kinds are shared with everything else in the process (or are code):
#: reachability stops at them.
SHARED = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    asyncio.AbstractEventLoop,
)
SCALARS = (int, float, str, bytes)


class Wire:
    """What the Event Hub would send on each partition's link: events made on demand (only a
    count is kept, so the wire itself never grows)."""

    def __init__(self) -> None:
        self.sent: collections.Counter[str] = collections.Counter()
        self.arrived = asyncio.Condition()

    async def send(self, partition: str, count: int) -> None:
        async with self.arrived:
            self.sent[partition] += count
            self.arrived.notify_all()

    def client(self, address: receiving.EventHubAddress) -> WireClient:
        return WireClient(self)


class WireClient:
    """Stands in for ``EventHubConsumerClient``: the one private method the adapter calls."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def _create_consumer(
        self,
        consumer_group: str,
        partition: str,
        event_position: Any,
        on_event_received: Callable[[list[EventData]], Awaitable[None]],
        **kwargs: Any,
    ) -> WireConsumer:
        return WireConsumer(self.wire, partition, int(event_position), on_event_received)

    async def close(self) -> None:
        return None


class WireHandler:
    """The SDK consumer's AMQP client as far as the adapter sees it: its link."""

    def __init__(self, link: ReceiverLink) -> None:
        self._link = link
        self._keep_alive_thread = None


class WireConsumer:
    """The SDK's per-partition consumer, its transport replaced by the wire: each event is
    encoded as Event Hubs sends it and goes through the SDK's real ``ReceiverLink`` (decoding
    and delivery bookkeeping), then becomes an ``EventData`` as in the SDK's receive loop."""

    def __init__(
        self,
        wire: Wire,
        partition: str,
        after: int,
        on_event_received: Callable[[list[EventData]], Awaitable[None]],
    ) -> None:
        self.wire = wire
        self.partition = partition
        self.next = after + 1
        self.on_event_received = on_event_received
        self.received: list[amqp_message.Message] = []
        link = ReceiverLink(  # type: ignore[no-untyped-call]
            None,
            0,
            "orders/ConsumerGroups/$Default/Partitions/0",
            on_transfer=self._on_transfer,
            network_trace=False,
            network_trace_params={},
        )
        self._handler = WireHandler(link)
        self.delivery_id = 0

    async def _on_transfer(self, frame: Any, message: amqp_message.Message) -> None:
        self.received.append(message)

    def _transfer(self, sequence_number: int) -> tuple[Any, ...]:
        message = amqp_message.Message(
            message_annotations={
                b"x-opt-sequence-number": {TYPE: AMQPTypes.long, VALUE: sequence_number},
                b"x-opt-offset": str(sequence_number * 100).encode(),
                b"x-opt-enqueued-time": {
                    TYPE: AMQPTypes.timestamp,
                    VALUE: 1_767_225_600_000 + sequence_number,
                },
            },
            data=[f"event {sequence_number}".encode()],
        )
        payload = memoryview(encode_payload(bytearray(), message))
        self.delivery_id += 1
        tag = self.delivery_id.to_bytes(16, "big")
        # handle, delivery id, tag, format, settled, more, ..., payload (index 11)
        return (0, self.delivery_id, tag, 0, True, False, None, None, None, None, None, payload)

    async def _open(self) -> None:
        """The link exists from the start here (the receive adapter opens before receiving)."""

    async def receive(self, batch: bool, max_batch_size: int, max_wait_time: Any) -> None:
        link = self._handler._link
        while True:
            async with self.wire.arrived:
                await self.wire.arrived.wait_for(lambda: self.wire.sent[self.partition] > self.next)
                end = self.wire.sent[self.partition]
            while self.next < end:
                count = min(max_batch_size, end - self.next)
                for n in range(self.next, self.next + count):
                    await link._incoming_transfer(self._transfer(n))  # type: ignore[no-untyped-call]
                self.next += count
                events = [EventData._from_message(m) for m in self.received]
                self.received.clear()
                await self.on_event_received(events)

    async def close(self) -> None:
        return None


class LastCheckpoint:
    """A checkpoint store that keeps the last checkpoint only (the shared fake keeps every
    write's history for its tests: that would grow here)."""

    def __init__(self) -> None:
        self.checkpoint = consumerfakes.FakeCheckpoint(-1, "-1", 0, "")

    async def fence(
        self, partition: str, epoch: int, *, start: Any
    ) -> consumerfakes.FakeCheckpoint:
        self.checkpoint = dataclasses.replace(self.checkpoint, epoch=epoch, owner_id="pod-a")
        return self.checkpoint

    async def update(
        self, partition: str, *, offset: str, sequence_number: int
    ) -> consumerfakes.FakeCheckpoint:
        self.checkpoint = dataclasses.replace(
            self.checkpoint, offset=offset, sequence_number=sequence_number
        )
        return self.checkpoint

    async def keep(self, partition: str) -> consumerfakes.FakeCheckpoint | None:
        return self.checkpoint

    def release(self, partition: str) -> None:
        return None


class Counting:
    """A handler that keeps nothing of what it handled."""

    def __init__(self) -> None:
        self.batches = 0

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        self.batches += 1


def live(kinds: Callable[[type], bool]) -> collections.Counter[str]:
    """Live objects (after a collection) whose type ``kinds`` selects, by type name."""
    gc.collect()
    return collections.Counter(
        f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects() if kinds(type(o))
    )


def ours(kind: type) -> bool:
    module = getattr(kind, "__module__", None)  # a descriptor on some extension metatypes
    return isinstance(module, str) and module.startswith(("eventhub_balancer", "tests."))


def sdk_events(kind: type) -> bool:
    return issubclass(kind, EventData | amqp_message.Message)


def reachable(roots: Iterable[object]) -> int:
    """How many objects can be reached from ``roots`` (untracked ones too: bytes, ints),
    stopping at what the whole process shares (`SHARED`). A number or a string counts once per
    reference to it: whether two references share one object is chance (an int computed
    again is a new object), whereas how many references there are is what a leak changes."""
    seen: set[int] = set()
    count = 0
    stack = list(roots)
    while stack:
        item = stack.pop()
        if isinstance(item, SHARED):
            continue
        if isinstance(item, SCALARS):
            count += 1
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        count += 1
        stack.extend(gc.get_referents(item))
    return count


class Scene:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wire = Wire()
        monkeypatch.setattr(receiving, "make_client", self.wire.client)
        self.store = LastCheckpoint()
        self.handler = Counting()
        self.stats = metrics.PartitionStats()
        self.worker = partitions.PartitionWorker(
            partition=PARTITION,
            epoch=1,
            consumer="orders",
            pod="pod-a",
            store=self.store,
            open_receiver=self.open_receiver,
            resolve_start=consumerfakes.resolve_nothing,
            processor=self.handler,
            settings=SETTINGS,
            stats=self.stats,
        )

    def open_receiver(
        self, partition: str, epoch: int, position: deliveries.ReceivePosition
    ) -> receiving.PartitionReceiver:
        return receiving.PartitionReceiver(
            address=ADDRESS, partition=partition, epoch=epoch, position=position
        )

    def handled(self, count: int) -> Callable[[], bool]:
        return lambda: self.handler.batches == count

    async def batches(self, count: int) -> None:
        """Send and process batches, one at a time, until ``count`` are done and the last
        one's checkpoint is written (so that every count is taken at the same point)."""
        while self.handler.batches < count:
            await self.wire.send(PARTITION, BATCH)
            await consumerfakes.eventually(self.handled(self.handler.batches + 1))
        last = self.wire.sent[PARTITION] - 1
        await consumerfakes.eventually(lambda: self.stats.checkpointed_sequence_number == last)


async def test_a_worker_holds_as_many_objects_after_2000_batches_as_after_200(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scene = Scene(monkeypatch)
    task = asyncio.create_task(scene.worker.run())
    try:
        await scene.batches(200)
        project, events = live(ours), live(sdk_events)
        reach = reachable([task])
        await scene.batches(2000)
        # Nothing grew. Fewer is no leak: what an earlier test of this worker process left
        # (an emulator's idle management connection, say) may be freed meanwhile.
        assert live(ours) - project == collections.Counter()
        assert live(sdk_events) - events == collections.Counter()
        assert reachable([task]) == reach
        assert scene.stats.events == 2000 * BATCH  # it did process them all
    finally:
        scene.worker.release()
        async with asyncio.timeout(60):
            await task
