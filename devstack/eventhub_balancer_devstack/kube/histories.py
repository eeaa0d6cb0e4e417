"""The history of committed changes and the live watches they fan out to.

Kept apart from the object store (`storage`) because a watch only ever sees what the store
has committed: the store records each change here once, with its resource version, and this
module alone decides which watches get it and how far back a watch may resume (410 Gone once
that part of the history is compacted).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
from typing import Any, Literal

from eventhub_balancer_devstack.kube import failures

Body = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]

#: How many changes watches can resume from; an older resourceVersion gets 410 Gone.
HISTORY_SIZE = 10_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchEvent:
    """One committed change; ``previous`` lets selector-filtered watches see objects leave."""

    type: EventType
    storage_key: tuple[str, str]
    body: Body
    previous: Body | None
    resource_version: int


@dataclasses.dataclass(eq=False, kw_only=True)
class Subscription:
    """A live watch: changes of one kind arrive in the queue, ``None`` means the server stops."""

    storage_key: tuple[str, str]
    queue: asyncio.Queue[WatchEvent | None] = dataclasses.field(default_factory=asyncio.Queue)


class History:
    """The last ``size`` changes of all kinds, and the watches subscribed to each kind."""

    def __init__(self, *, size: int = HISTORY_SIZE) -> None:
        self._compacted = 0  # the highest resource version that fell out of the history
        self._events: collections.deque[WatchEvent] = collections.deque(maxlen=size)
        self._subscriptions: set[Subscription] = set()

    def subscribe(self, storage_key: tuple[str, str]) -> Subscription:
        subscription = Subscription(storage_key=storage_key)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    def since(self, storage_key: tuple[str, str], resource_version: int) -> list[WatchEvent]:
        """The history of one kind after a version; 410 Gone if that part is compacted."""
        if resource_version < self._compacted:
            raise failures.expired(
                f"too old resource version: {resource_version} ({self._compacted + 1})"
            )
        return [
            event
            for event in self._events
            if event.resource_version > resource_version and event.storage_key == storage_key
        ]

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
    ) -> None:
        """Keep one committed change and hand it to the watches on its kind."""
        if self._events.maxlen is not None and len(self._events) == self._events.maxlen:
            self._compacted = self._events[0].resource_version
        event = WatchEvent(
            type=event_type,
            storage_key=storage_key,
            body=copy.deepcopy(body),
            previous=copy.deepcopy(previous),
            resource_version=resource_version,
        )
        self._events.append(event)
        for subscription in self._subscriptions:
            if subscription.storage_key == storage_key:
                subscription.queue.put_nowait(event)
