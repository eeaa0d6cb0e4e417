"""The resource versions of the local API server's store and the changes they order.

The store (`storage`) keeps the objects; this is its other half: the one global counter that
gives every committed change its ``resourceVersion``, the history each change is recorded in
(`histories`), the watches subscribed to it, and the write record. Like the store, it is used
on the server's event loop only, and nothing in it awaits.
"""

from __future__ import annotations

import time
from typing import Any

from eventhub_balancer_devstack.kube import histories, resources

Body = dict[str, Any]


class VersionedHistory:
    """The resource version counter of one store and the history of the changes it numbers."""

    def __init__(
        self,
        *,
        history_size: int = histories.HISTORY_SIZE,
        write_record_size: int = histories.WRITE_RECORD_SIZE,
    ) -> None:
        self._resource_version = 0
        self._history = histories.History(size=history_size, write_record_size=write_record_size)
        #: The version each custom resource began to be served at: a real server's watch
        #: cache for it starts then, and a watch cannot resume from before (410).
        self._served_since: dict[tuple[str, str], int] = {}

    @property
    def resource_version(self) -> str:
        return str(self._resource_version)

    # -- watching ----------------------------------------------------------------------------

    def subscribe(self, spec: resources.ResourceSpec) -> histories.Subscription:
        return self._history.subscribe(spec.storage_key)

    def unsubscribe(self, subscription: histories.Subscription) -> None:
        self._history.unsubscribe(subscription)

    def changes_since(
        self, spec: resources.ResourceSpec, resource_version: int
    ) -> list[histories.WatchEvent]:
        """The history of one kind after a version; 410 Gone if that part is compacted."""
        floor = self._served_since.get(spec.storage_key, 0)
        return self._history.since(spec.storage_key, resource_version, floor=floor)

    def latest_version(self, spec: resources.ResourceSpec) -> int:
        """The version of the latest change of ``spec``'s kind: what a bookmark may say (a real
        server's watch cache of a kind knows that kind's changes only)."""
        return self._history.latest(spec.storage_key)

    def _begin_serving(self, storage_key: tuple[str, str]) -> None:
        self._served_since.setdefault(storage_key, self._resource_version)

    def _end_serving(self, storage_key: tuple[str, str]) -> None:
        self._served_since.pop(storage_key, None)

    def close_subscriptions(self) -> None:
        """End every watch (the server is stopping)."""
        self._history.close()

    def wake_watches(self) -> None:
        """Make every watch look at its faults again (`watchfaults`: they changed)."""
        self._history.wake()

    def advance_version(self) -> int:
        """Move the resource version on without a change, and return it.

        Resource versions are opaque to clients and need not be contiguous (etcd's revision
        moves with every write of every kind). A fault that compacts the watch history
        (410 Gone below a version) needs a version that no watch resumes from yet, so that a
        client's fresh LIST gets a version the fault lets through.
        """
        return int(self._next_version())

    # -- the write record --------------------------------------------------------------------

    def record_writes(self, spec: resources.ResourceSpec) -> None:
        """Keep every committed change of ``spec``'s kind from now on, until `take_writes`."""
        self._history.writes.record_kind(spec.storage_key)

    def take_writes(self) -> histories.Writes:
        """The committed changes recorded since the last call, oldest first."""
        return self._history.writes.take()

    def _emit(
        self,
        event_type: histories.EventType,
        spec: resources.ResourceSpec,
        body: Body,
        previous: Body | None,
    ) -> None:
        self._history.record(
            event_type,
            spec.storage_key,
            body,
            previous,
            resource_version=self._resource_version,
            committed_at=time.time(),
        )

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)
