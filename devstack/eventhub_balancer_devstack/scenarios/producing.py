"""A producer at a bounded rate, spread evenly over the hub's partitions (also new ones).

The scenario's load must stay modest (2 cores run the emulator, the operator and the
consumers) and even (so that lag and events/s per pod mean something). Every tick it sends
one batch per partition; the partition list is asked of a callable each tick, so partitions
added while it runs get events at once. Sequence numbers are not tracked here: the emulator's
partition properties are the truth of what was produced.

On request (`Producer.poison`) it marks single events as poison for the chaos run
(`chaoshandlers`): the property is set on one event of the next rounds' batches, one
partition after another, chosen by the caller's seeded RNG.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from eventhub_balancer_devstack import chaoshandlers

logger = logging.getLogger(__name__)

#: Seconds between rounds of sends: short enough for a smooth rate, long enough that a round
#: over 40 partitions is cheap.
TICK_S = 0.5
#: Bytes of payload per event (a typical small telemetry event).
EVENT_BYTES = 100


class Producer:
    """Sends ``rate`` events/s over ``partitions()`` until stopped (runs on an asyncio loop)."""

    def __init__(
        self,
        *,
        connection_string: str,
        hub: str,
        rate: float,
        partitions: Callable[[], Sequence[str]],
    ) -> None:
        self.connection_string = connection_string
        self.hub = hub
        self.rate = rate
        self.partitions = partitions
        self.sent = 0
        self.failures = 0
        self._stop = asyncio.Event()
        self._owed: dict[str, float] = {}
        self._lock = threading.Lock()
        #: Partitions owed a poison event (any thread adds, the sending loop takes).
        self._poison_due: list[str] = []
        #: How many poison events were sent, per partition.
        self.poisoned: dict[str, int] = {}

    def stop(self) -> None:
        self._stop.set()

    def poison(self, partition: str) -> None:
        """Mark one event of ``partition`` as poison in the next round that sends to it."""
        with self._lock:
            self._poison_due.append(partition)

    async def run(self) -> None:
        from azure.eventhub import EventData
        from azure.eventhub.aio import EventHubProducerClient
        from azure.eventhub.exceptions import EventHubError

        client = EventHubProducerClient.from_connection_string(
            self.connection_string, eventhub_name=self.hub
        )
        payload = b"x" * EVENT_BYTES
        known = 0
        try:
            next_tick = time.monotonic()
            while not self._stop.is_set():
                ids = list(self.partitions())
                if len(ids) != known:
                    # The SDK's producer keeps the partition ids it first read: a grown hub
                    # needs a new client before it accepts sends to the new partitions.
                    if known:
                        await client.close()
                        client = EventHubProducerClient.from_connection_string(
                            self.connection_string, eventhub_name=self.hub
                        )
                    known = len(ids)
                share = self.rate * TICK_S / max(1, len(ids))
                sends = []
                with self._lock:
                    due, self._poison_due = self._poison_due, []
                for partition in ids:
                    owed = self._owed.get(partition, 0.0) + share
                    count = int(owed)
                    self._owed[partition] = owed - count
                    marked = partition in due and count > 0
                    if marked:
                        due.remove(partition)
                        self.poisoned[partition] = self.poisoned.get(partition, 0) + 1
                    if count > 0:
                        sends.append(
                            self._send(client, partition, count, EventData, payload, poison=marked)
                        )
                # One round trip per partition, all in flight at once: sequential sends over
                # 40 partitions would cap the rate on a busy machine.
                for result in await asyncio.gather(*sends, return_exceptions=True):
                    if isinstance(result, EventHubError):
                        # A dropped connection (chaos) loses nothing that was acknowledged;
                        # the SDK reconnects on the next send.
                        self.failures += 1
                        logger.info("a send failed: %s", result)
                    elif isinstance(result, BaseException):
                        raise result
                    else:
                        self.sent += result
                with self._lock:
                    self._poison_due[:0] = due  # not sent this round (no events due): next
                next_tick += TICK_S
                delay = next_tick - time.monotonic()
                if delay < 0:
                    next_tick = time.monotonic()  # behind: do not try to catch up in a burst
                    delay = 0
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=delay)
        finally:
            await client.close()

    @staticmethod
    async def _send(
        client: Any, partition: str, count: int, event: Any, payload: bytes, *, poison: bool
    ) -> int:
        batch = await client.create_batch(partition_id=partition)
        for index in range(count):
            data = event(payload)
            if poison and index == 0:
                data.properties = {chaoshandlers.PROPERTY: chaoshandlers.POISON}
            batch.add(data)
        await client.send_batch(batch)
        return count
