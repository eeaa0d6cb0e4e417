"""SIGTERM's stop of a pod's partition workers: every one released within a bounded time.

Each worker finishes its batch in flight and writes its final checkpoint within most of the
shutdown timeout; one that has not ended by 90 % of it (a handler still running, a final
checkpoint write that hangs) is cancelled, and its release is never acknowledged: its
handler or final checkpoint was left unfinished. `Drained` says which partitions are still in
flight that way, for the runtime's last acknowledgement (`runtime.Runtime`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping

from eventhub_balancer import handoffs
from eventhub_balancer.consumer import partitions

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Drained:
    """What the stop left: the workers it asked to release, and those it had to cancel."""

    workers: list[partitions.PartitionWorker]
    unfinished: frozenset[str]

    @property
    def hung(self) -> list[str]:
        """The partitions whose handler call still runs (a thread cannot be stopped)."""
        return sorted(w.partition for w in self.workers if w.handler_running)

    @property
    def in_flight(self) -> frozenset[str]:
        """The partitions with something unfinished: a release cancelled, a handler running."""
        return self.unfinished | frozenset(self.hung)


async def stop_all(
    workers: Mapping[str, partitions.PartitionWorker],
    tasks: Mapping[str, asyncio.Task[handoffs.Outcome]],
    *,
    shutdown_s: float,
) -> Drained:
    """Release every worker within most of ``shutdown_s`` (the shutdown timeout); cancel what
    is left at 90 % of it."""
    drained = list(workers.values())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + shutdown_s * 0.9
    for worker in drained:
        worker.release(timeout=max(0.5, shutdown_s * 0.6))
    running = dict(tasks)
    pending = set(running.values())
    while pending:
        # A handler still running past its release exits the process at the release's own
        # bound (a hand-off's began before the SIGTERM): stop just before, so that the
        # releases made are acknowledged first, and the exit comes no later than it would.
        exits = [w.exit_at for w in drained if w.handler_running and w.exit_at is not None]
        until = min([deadline, *(e - 0.5 for e in exits)])
        done, pending = await asyncio.wait(
            pending, timeout=max(0.0, until - loop.time()), return_when=asyncio.FIRST_COMPLETED
        )
        if not done:
            break  # that time came
    unfinished = {p for p, task in running.items() if not task.done()}
    if unfinished:
        logger.warning("shutdown: partitions %s did not release in time", sorted(unfinished))
        for partition in unfinished:
            running[partition].cancel()
        await asyncio.gather(*(running[p] for p in unfinished), return_exceptions=True)
    await asyncio.sleep(0)  # let the done callbacks record the releases
    return Drained(drained, frozenset(unfinished))
