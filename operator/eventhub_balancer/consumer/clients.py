"""The pod's open clients (Event Hubs and the checkpoint store) for the coordinates it reads.

They are opened once per set of coordinates (`connections.Coordinates`) and switched only
when no worker runs on the old ones any more: the runtime releases every partition into the
old store first. Clients that cannot be opened (a missing credential, a host the pod may not
reach, an unreachable checkpoint store) are tried again with backoff, and the failure is kept
so that the runtime can report the partitions waiting for them. What only a receive link finds
out (a consumer group or hub that does not exist) fails each partition instead, and
`restarts` paces those restarts and says it once.

Credentials kept in files (`secretfiles`) are part of what the clients were opened with: when
a file holds a new value, `renew` swaps it under the open clients (`connections.Backend.renew`)
for what that string feeds only: a storage key replaces the checkpoint store's client under the
running workers, which keep their fences; an Event Hubs key has each worker open its link
again at its epoch (`partitions.PartitionWorker.reopen`). No partition is released for it.
Clients that cannot swap (a backend without `renew`, or a value the swap refuses) are replaced
as for new coordinates (the runtime releases every partition into the old ones first), and
clients that could not be opened are tried again at once. Nothing else reopens them: a refused
credential fails the partitions, whose restarts are paced, and the clients stay until the
file changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterable

from eventhub_balancer import errors
from eventhub_balancer.consumer import (
    assignments,
    connections,
    loopclocks,
    partitions,
    restarts,
    secretfiles,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class OpenFailure:
    """The clients of ``key`` could not be opened: tried again after ``not_before``."""

    key: connections.Coordinates
    failures: int
    not_before: float
    error: str
    #: The revision of the credential files tried: a newer one is tried at once.
    revision: int = 0


class Clients:
    """The open clients of one set of coordinates at a time."""

    def __init__(
        self,
        factory: connections.BackendFactory,
        *,
        files: secretfiles.SecretFiles | None = None,
    ) -> None:
        """``files``: the credential files ``factory`` reads (None: none)."""
        self.factory = factory
        self.files = files
        #: The coordinates of the open clients (None: none open).
        self.key: connections.Coordinates | None = None
        #: The revision of the credential files the open clients were opened with (or
        #: swapped to), and its files' own (`secretfiles.SecretFiles.revisions`).
        self.revision = 0
        self._revisions = (0, 0)
        #: The revision whose swap failed (the clients are opened again for it instead).
        self._unswapped: int | None = None
        #: The last failure to open clients, until clients open.
        self.failure: OpenFailure | None = None
        self._backend: connections.Backend | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    def reading(self, key: connections.Coordinates) -> bool:
        """The pod reads ``key``: its clients are open, or being tried (and reported)."""
        return self.key == key or self.unopened(key) is not None

    def moving(self, key: connections.Coordinates) -> str | None:
        """Why the open clients must give way before ``key`` is served (None: they serve
        it, or none are open). Reads the credential files again, at their pace."""
        revision = self.files.refresh() if self.files is not None else 0
        if self.key is None:
            return None
        if not key.eventhub_name:  # no assignment at all (`assignments.WITHDRAWN`)
            return "the pod's assignment ConfigMap is gone or emptied"
        if key != self.key:
            return "the Event Hub or checkpoint coordinates changed"
        if revision != self.revision:
            return "a credential file holds a new connection string"
        return None

    async def renew(
        self, key: connections.Coordinates, workers: Iterable[partitions.PartitionWorker]
    ) -> bool:
        """Read the credential files again (at their pace) and swap a new value under the
        open clients of ``key``; an Event Hubs key has ``workers`` open their links again.
        True when it swapped one (partitions failing with the old key may start at once)."""
        files = self.files
        if files is None:
            return False
        revision = files.refresh()
        backend = self._backend
        if backend is None or backend.renew is None or key != self.key:
            return False
        if revision in (self.revision, self._unswapped):
            return False
        (eventhub_now, blob_now), (eventhub_then, blob_then) = files.revisions, self._revisions
        eventhub, blob = eventhub_now != eventhub_then, blob_now != blob_then
        try:
            await backend.renew(eventhub_string=eventhub, blob_string=blob)
        except (errors.TransientError, errors.ConfigurationError, errors.InvalidInput) as e:
            self._unswapped = revision
            logger.error("cannot switch to the new connection string (%s): opening new clients", e)
            return False
        self.revision, self._revisions = revision, files.revisions
        if eventhub:
            for worker in workers:
                worker.reopen()
        done = [eventhub and "receive links opened again", blob and "checkpoint client replaced"]
        logger.info(
            "switched to the new connection string (%s), with no partition released",
            ", ".join(what for what in done if what),
        )
        return True

    def problem(self) -> str | None:
        """What to fix in a credential file whose new content was refused (None: nothing)."""
        return self.files.problem if self.files is not None else None

    def unopened(self, key: connections.Coordinates | None) -> OpenFailure | None:
        """Why the clients of ``key`` could not be opened, while they are tried again."""
        failure = self.failure
        return failure if failure is not None and failure.key == key else None

    async def get(
        self, assignment: assignments.Assignment, key: connections.Coordinates
    ) -> connections.Backend | None:
        """The open clients of ``key``; None while they cannot be opened.

        Opening the clients of new coordinates closes the old ones: call it only once no
        worker runs on them any more.
        """
        revision = self.files.revision if self.files is not None else 0
        if self._backend is not None and key == self.key and revision == self.revision:
            return self._backend
        failure = self.failure
        if failure is not None and (failure.key, failure.revision) != (key, revision):
            failure = None  # other coordinates or credentials: what failed says nothing
        if failure is not None and loopclocks.now() < failure.not_before:
            return None
        try:
            backend = await self._open(assignment, key)
        except (errors.TransientError, errors.ConfigurationError, errors.InvalidInput) as e:
            failures = (failure.failures if failure is not None else 0) + 1
            delay = restarts.backoff_delay(failures)
            self.failure = OpenFailure(key, failures, loopclocks.now() + delay, str(e), revision)
            logger.error(
                "cannot open the Event Hub or checkpoint store (retrying in %.1f s): %s", delay, e
            )
            return None
        self.failure = None
        self.revision = revision
        self._revisions = self.files.revisions if self.files is not None else (0, 0)
        return backend

    async def _open(
        self, assignment: assignments.Assignment, key: connections.Coordinates
    ) -> connections.Backend:
        await self.close()
        stack = contextlib.AsyncExitStack()
        try:
            backend = await stack.enter_async_context(self.factory(assignment))
        except BaseException:
            await stack.aclose()
            raise
        self._backend, self.key, self._stack = backend, key, stack
        return backend

    async def close(self) -> None:
        stack, self._stack = self._stack, None
        self._backend = self.key = None
        if stack is not None:
            await stack.aclose()
