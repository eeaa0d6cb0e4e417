"""The one checkpoint write a partition's worker has on the wire, and how it ends with it.

The worker (`partitions.PartitionWorker`) starts a batch's checkpoint write in the background
and waits for the next batch meanwhile; it awaits the write before the next handler call, so
at most one is ever in flight. When the worker ends while one is:

- on a failure of its own (the receive link gave up, say), the write is let finish first
  (`InFlight.settle`), within `SETTLE_WRITE_S` and never past a release's deadline: cancelled,
  it left its batch, already handled, to be handled again by the restart that follows;
- on anything else (the partition lost, the worker cancelled by a shutdown) it is cancelled
  (`InFlight.cancel`). A write that lands anyway is still owner-checked by the store: it never
  moves a checkpoint a higher epoch holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

#: The longest a failed worker waits for its checkpoint write in flight before it cancels it
#: and ends. Longer than the store's own budget for one write (20 s, its last request 5 s), so
#: that the write ends on its own first; this bounds a store that does not answer at all.
SETTLE_WRITE_S = 30.0


class InFlight:
    """At most one checkpoint write, started by `start` and collected by one of the rest."""

    def __init__(self, partition: str) -> None:
        self.partition = partition
        self._task: asyncio.Task[bool] | None = None

    @property
    def busy(self) -> bool:
        """A write was started and not collected yet."""
        return self._task is not None

    @property
    def ended(self) -> bool:
        """A write was started and has ended (its result not collected yet)."""
        return self._task is not None and self._task.done()

    def start(self, write: Coroutine[Any, Any, bool]) -> None:
        assert self._task is None, "a checkpoint write is still in flight"
        self._task = asyncio.create_task(write)

    async def wait(self) -> None:
        """Wait for the write, if any; its error (`errors.OwnershipLost` above all) is raised."""
        task, self._task = self._task, None
        if task is not None:
            await task

    async def settle(
        self, *, deadline: Callable[[], float | None], stop: asyncio.Event
    ) -> errors.OwnershipLost | None:
        """Let the write finish within `SETTLE_WRITE_S`, and within ``deadline()`` (a release's,
        read again when ``stop`` is set). Its `errors.OwnershipLost` is returned (the store
        refused it: a newer owner holds the partition); its other failures are logged, and
        a write still running past the bound is left for `cancel`."""
        task = self._task
        if task is None:
            return None
        loop = asyncio.get_running_loop()
        limit = loop.time() + SETTLE_WRITE_S
        stopped = asyncio.ensure_future(stop.wait())
        waits: set[asyncio.Future[Any]] = {task, stopped}
        try:
            while not task.done():
                release = deadline()
                left = (limit if release is None else min(limit, release)) - loop.time()
                if left <= 0:
                    logger.warning(
                        "partition %s: checkpoint write unfinished, cancelled", self.partition
                    )
                    return None
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if stopped.done():
                    waits.discard(stopped)  # a release: its deadline counts from now on
        finally:
            stopped.cancel()
        self._task = None
        if task.cancelled():
            return None
        error = task.exception()
        if isinstance(error, errors.OwnershipLost):
            return error
        if error is not None:
            logger.warning("partition %s: checkpoint write failed too: %s", self.partition, error)
        return None

    async def cancel(self) -> None:
        """Cancel the write in flight and collect it. One that already ended (with
        OwnershipLost, when the link was stolen first) is collected too, so that asyncio
        does not report its error as never retrieved: the worker ended for the same reason."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
