"""Micro-batches cut from the events a receiver buffered ahead of the handler.

The SDK hands out whatever arrived (one event at a time when the stream is slow) and a Spark
batch costs 0.1 s or more, so batches are filled here up to a size or a deadline. The buffer
also carries the receiver's backpressure (the receive link stops taking events while the
handler is behind) and its failure (a stolen link, a partition that cannot be reopened),
which the next call for a batch raises. No SDK type and no I/O: the receiving loop
(``adapters.receiving``) fills it, and deadlines are read from the event loop's clock.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries


class EventBuffer:
    """Events received and not yet handed out, in partition order (single event loop)."""

    def __init__(self, *, limit: int) -> None:
        #: Above this many buffered events, `wait_for_room` holds the receiving loop.
        self.limit = limit
        self._events: collections.deque[deliveries.ReceivedEvent] = collections.deque()
        self._arrived = asyncio.Event()
        self._drained = asyncio.Event()
        self._failure: errors.EventHubBalancerError | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._events)

    def add(self, events: Iterable[deliveries.ReceivedEvent]) -> None:
        """Buffer events the link delivered; a waiting `take` sees them at once."""
        if self._closed or self._failure is not None:
            return  # a delivery racing with close or failure: nobody takes it any more
        self._events.extend(events)
        self._arrived.set()

    async def wait_for_room(self) -> None:
        """Hold the receiving loop while the buffer is full (until `take` or `close`)."""
        while len(self._events) >= self.limit and not self._closed:
            self._drained.clear()
            await self._drained.wait()

    @property
    def failed(self) -> bool:
        """Receiving has ended for good (`fail`): what is delivered after is dropped."""
        return self._failure is not None

    def fail(self, failure: errors.EventHubBalancerError) -> None:
        """Make every later `take` raise ``failure`` (receiving has ended for good)."""
        self._failure = failure
        self._arrived.set()

    def close(self) -> None:
        """Drop what is buffered (never handed out: no checkpoint passed it); free the loop."""
        self._closed = True
        self._events.clear()
        self._drained.set()

    async def take(self, *, max_size: int, max_wait: float) -> list[deliveries.ReceivedEvent]:
        """Up to ``max_size`` events: returns when full, or ``max_wait`` after the first
        event arrived, or (empty) after ``max_wait`` with nothing at all.

        Cancellation-safe: events are removed only on return, so a cancelled call loses none.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        first_seen: float | None = start if self._events else None
        timed_out = False
        while True:
            if self._failure is not None:
                raise self._failure
            if len(self._events) >= max_size or timed_out:
                break
            if self._events and first_seen is None:
                first_seen = loop.time()
            deadline = (first_seen if first_seen is not None else start) + max_wait
            self._arrived.clear()
            # A deadline on the loop's timer, not a computed remainder: a remainder below the
            # clock's resolution would never run out on a clock that stands still (fake time).
            try:
                async with asyncio.timeout_at(deadline):
                    await self._arrived.wait()
            except TimeoutError:
                timed_out = True
        count = min(max_size, len(self._events))
        taken = [self._events.popleft() for _ in range(count)]
        if len(self._events) < self.limit:
            self._drained.set()
        return taken
