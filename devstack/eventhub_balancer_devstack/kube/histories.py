"""The history of committed changes and the live watches they fan out to.

Kept apart from the object store (`storage`) because a watch only ever sees what the store
has committed: the store records each change here once, with its resource version, and this
module alone decides which watches get it and how far back a watch may resume (410 Gone once
that part of the history is compacted).

It also keeps the *write record*: every committed change of the kinds asked for, until it is
read. Watches may lag, stall or be re-listed (`watchfaults`); an audit of what the server
actually committed (the chaos run's epoch audit) must not depend on them, so it reads this.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import enum
from typing import Any, Literal

from eventhub_balancer_devstack.kube import failures

Body = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]

#: How many changes, of all kinds, the history keeps. A watch resumed from a resourceVersion
#: gets 410 Gone once a change of its own kind after that version fell out: as with a real
#: server's watch cache per resource, a flood of ConfigMap writes does not expire the place
#: of a pod watch that missed no pod change. One bound for all kinds keeps the memory as it
#: was (about 24 MB for 10,000 changes of the operator's ConfigMaps, each with its previous
#: body).
HISTORY_SIZE = 10_000

#: How many committed writes the write record keeps between two readings. A chaos run reads
#: it every fraction of a second and commits well under 1,000 writes a second; a reader that
#: falls this far behind is told how many it missed (`Writes.dropped`), never silently.
WRITE_RECORD_SIZE = 100_000


class Signal(enum.Enum):
    """What a watch's queue carries besides changes."""

    #: The watch faults changed (`watchfaults`): look at them again now.
    WAKE = "wake"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchEvent:
    """One committed change; ``previous`` lets selector-filtered watches see objects leave."""

    type: EventType
    storage_key: tuple[str, str]
    body: Body
    previous: Body | None
    resource_version: int
    #: When the store committed it (the wall clock, seconds since the epoch): the benchmarks
    #: time the stages of a hand-off from it (`benchmarks.stages`).
    committed_at: float = 0.0


@dataclasses.dataclass(eq=False, kw_only=True)
class Subscription:
    """A live watch: changes of one kind arrive in the queue, ``None`` means the server stops."""

    storage_key: tuple[str, str]
    queue: asyncio.Queue[WatchEvent | Signal | None] = dataclasses.field(
        default_factory=asyncio.Queue
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Writes:
    """Committed changes taken from the write record, oldest first, and how many of them
    fell out of it unread since the last reading (the record is bounded)."""

    events: tuple[WatchEvent, ...]
    dropped: int


class WriteRecord:
    """Every committed change of the recorded kinds, kept until taken; bounded by ``size``."""

    def __init__(self, *, size: int = WRITE_RECORD_SIZE) -> None:
        self._kinds: set[tuple[str, str]] = set()
        self._events: collections.deque[WatchEvent] = collections.deque(maxlen=size)
        self._dropped = 0

    def record_kind(self, storage_key: tuple[str, str]) -> None:
        self._kinds.add(storage_key)

    def add(self, event: WatchEvent) -> None:
        if event.storage_key not in self._kinds:
            return
        if len(self._events) == self._events.maxlen:
            self._dropped += 1
        self._events.append(event)

    def take(self) -> Writes:
        taken = Writes(events=tuple(self._events), dropped=self._dropped)
        self._events.clear()
        self._dropped = 0
        return taken


class History:
    """The last ``size`` changes of all kinds, how far each kind's history reaches back, and
    the watches subscribed to each kind."""

    def __init__(
        self, *, size: int = HISTORY_SIZE, write_record_size: int = WRITE_RECORD_SIZE
    ) -> None:
        #: The highest resource version of each kind that fell out of the history.
        self._compacted: dict[tuple[str, str], int] = {}
        #: The version of each kind's latest change: what a bookmark of that kind may say.
        self._latest: dict[tuple[str, str], int] = {}
        self._events: collections.deque[WatchEvent] = collections.deque(maxlen=size)
        self._subscriptions: set[Subscription] = set()
        self.writes = WriteRecord(size=write_record_size)

    def subscribe(self, storage_key: tuple[str, str]) -> Subscription:
        subscription = Subscription(storage_key=storage_key)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    def since(
        self, storage_key: tuple[str, str], resource_version: int, *, floor: int = 0
    ) -> list[WatchEvent]:
        """The history of one kind after a version; 410 Gone if that part is compacted, or
        older than ``floor`` (when the kind began to be served)."""
        oldest = max(self._compacted.get(storage_key, 0), floor)
        if resource_version < oldest:
            raise failures.expired(f"too old resource version: {resource_version} ({oldest})")
        return [
            event
            for event in self._events
            if event.resource_version > resource_version and event.storage_key == storage_key
        ]

    def latest(self, storage_key: tuple[str, str]) -> int:
        """The version of the latest change of one kind (0 before its first)."""
        return self._latest.get(storage_key, 0)

    def wake(self) -> None:
        """Make every watch look at its faults again (they changed)."""
        for subscription in self._subscriptions:
            subscription.queue.put_nowait(Signal.WAKE)

    def close(self) -> None:
        """End every watch (the server is stopping)."""
        for subscription in self._subscriptions:
            subscription.queue.put_nowait(None)
        self._subscriptions.clear()

    def record(
        self,
        event_type: EventType,
        storage_key: tuple[str, str],
        body: Body,
        previous: Body | None,
        *,
        resource_version: int,
        committed_at: float = 0.0,
    ) -> None:
        """Keep one committed change and hand it to the watches on its kind."""
        if self._events and len(self._events) == self._events.maxlen:
            dropped = self._events[0]
            self._compacted[dropped.storage_key] = dropped.resource_version
        event = WatchEvent(
            type=event_type,
            storage_key=storage_key,
            body=copy.deepcopy(body),
            previous=copy.deepcopy(previous),
            resource_version=resource_version,
            committed_at=committed_at,
        )
        self._events.append(event)
        self._latest[storage_key] = resource_version
        self.writes.add(event)
        for subscription in self._subscriptions:
            if subscription.storage_key == storage_key:
                subscription.queue.put_nowait(event)
