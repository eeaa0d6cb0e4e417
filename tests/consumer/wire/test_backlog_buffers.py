"""Under a backlog, what a partition holds ahead of a slow handler is bounded, and the bound
is a setting.

A consumer group that starts from the earliest event of a hub with hours of retained data,
with a handler slower than the arrival rate, has every owned partition's buffers full for as
long as the backlog lasts: a pod's memory is then the number of events waiting per partition,
times the partitions, times the event size. The runtime's own buffer stops the receive link
when it holds ``max(4 x --batch-size, 2 x --prefetch)`` events, but the SDK below it keeps
reading: it takes up to ``--prefetch`` events off the link in one read, and reads again
while it holds no more than ``--prefetch``, so up to three times ``--prefetch`` more events
wait. The pages said 900 events at ``--batch-size 50``; on the emulator 1,450 waited.
Without a ``--prefetch`` setting, no flag could bring a partition below 1,500 waiting
events: 1.5 GB a partition with 1 MB events.

Counted here on the real SDK against the emulator, the runtime's buffer plus the SDK's, with
a handler that holds its first batch: never above `BatchSettings.most_waiting`, and
more than the runtime's own buffer plus one delivery (what the pages used to state).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from eventhub_balancer.adapters import receiving
from eventhub_balancer.consumer import assignments, connections, contexts, partitions, runtime
from tests.support.consumerfakes import configmap, eventually
from tests.support.fixtures.consumer import azure_backends, send_events


class Holding:
    """A handler that holds its first batch until the test ends."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.finish = asyncio.Event()

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        self.called.set()
        await self.finish.wait()


def waiting(receiver: receiving.PartitionReceiver) -> int:
    """Events received and not handed to the handler: the runtime's buffer and the SDK's."""
    sdk = receiver._consumer
    return len(receiver._buffer) + (0 if sdk is None else len(sdk._message_buffer))


@contextlib.asynccontextmanager
async def recording(
    factory: connections.BackendFactory, receivers: list[receiving.PartitionReceiver]
) -> AsyncIterator[connections.BackendFactory]:
    @contextlib.asynccontextmanager
    async def opened(assignment: assignments.Assignment) -> AsyncIterator[connections.Backend]:
        async with factory(assignment) as backend:

            def open_receiver(partition: str, epoch: int, position: Any) -> Any:
                receiver = backend.open_receiver(partition, epoch, position)
                assert isinstance(receiver, receiving.PartitionReceiver)
                receivers.append(receiver)
                return receiver

            yield dataclasses.replace(backend, open_receiver=open_receiver)

    yield opened


@pytest.mark.parametrize(
    ("batch_size", "prefetch", "backlog"),
    [(50, 300, 3000), (10, 10, 1000), (500, 300, 4000)],
    ids=["batch-50", "prefetch-10", "defaults"],
)
async def test_the_events_waiting_ahead_of_a_slow_handler_stay_within_the_stated_bound(
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    batch_size: int,
    prefetch: int,
    backlog: int,
) -> None:
    settings = partitions.BatchSettings(batch_size=batch_size, max_wait=0.2, prefetch=prefetch)
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": backlog})
    handler = Holding()
    receivers: list[receiving.PartitionReceiver] = []
    factory = azure_backends(
        eventhub_connection_string=cs,
        blob_connection_string=azurite.connection_string,
        owner="pod-a",
        batch=settings,
    )
    async with recording(factory, receivers) as backends:
        source = assignments.MemorySource()
        consumer = runtime.Runtime(
            settings=runtime.RuntimeSettings(
                consumer="orders", pod="pod-a", batch=settings, shutdown_timeout=2
            ),
            source=source,
            backends=backends,
            processor=handler,
        )
        task = asyncio.create_task(consumer.run())
        try:
            source.put(
                configmap(1, {"0": (1, "owned")}, checkpointContainer=blob_container.container_name)
            )
            async with asyncio.timeout(30):
                await handler.called.wait()
            (receiver,) = receivers
            # The buffers fill while the handler holds its batch; then they stay as they are.
            seen: list[int] = []

            def settled() -> bool:
                seen.append(waiting(receiver))
                return len(seen) > 50 and seen[-1] == seen[-50]

            await eventually(settled, within=30, what="the buffers to stop growing")
            most = max(seen)
            assert most <= settings.most_waiting, (most, settings.most_waiting)
            # More than the runtime's buffer plus one delivery, which is what the pages said.
            assert most > settings.buffer_limit + prefetch, (most, settings.buffer_limit)
        finally:
            handler.finish.set()
            consumer.request_shutdown()
            async with asyncio.timeout(20):
                await task
