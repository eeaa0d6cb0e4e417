"""The deaths of a batch, carried with its partition in the checkpoint blob (``ehbdeaths``).

A crash marker (`crashmarkers`) counts a death in the handler only for the pod's next
process. In a cluster that is too short-lived: the kubelet restarts a crashed container after
10 s, 20 s, 40 s ..., and the operator moves the partitions of a pod NotReady for longer than
``podGraceSeconds`` (20 s by default), so a pod counted one or two deaths, and the partition's
next owner started the batch again from attempt 1: the event walked through the fleet.

So once a death is counted (from a marker, or from the blob itself), the attempt about to be
made is written into the partition's checkpoint blob before the handler is called: the
batch's first sequence number and the attempts so far, counting that one. Each such attempt
is a failed one unless a checkpoint passes the batch; an owner that dies in it cannot say so,
and one that moves away in it has not finished the batch. A new owner reads the record when
it fences; when its first batch starts at that sequence number, it goes on counting from
there. The store keeps the record through the fence and the owner's later writes until a
checkpoint passes the batch; a parked batch's record is dropped, so that its next owner tries
it again, as it does a parked batch that raised.

What it costs: one conditional write (the ETag of the owner's last write, as every checkpoint
write) per attempt made after a counted death, and one more when such a batch is parked;
nothing for a batch that never killed a process. A write that fails for want of the store is
logged and skipped: the count then stays in the pod, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from eventhub_balancer import errors
from eventhub_balancer.contracts import checkpointblobs

logger = logging.getLogger(__name__)

#: Writes the record of one partition beside its checkpoint (None: no record).
Write = Callable[[checkpointblobs.Deaths | None], Awaitable[object]]


class DeathRecord:
    """What one partition worker's checkpoint blob counts of a batch's deaths."""

    def __init__(self, partition: str) -> None:
        self.partition = partition
        #: The record as the blob holds it (fenced, then as written here).
        self.held: checkpointblobs.Deaths | None = None
        self._write: Write | None = None
        #: The held batch was said to be ahead of the first one (said once).
        self._ahead_said = False

    def carry(self, held: checkpointblobs.Deaths | None, write: Write) -> None:
        """The fenced checkpoint holds ``held``; ``write`` writes the record from now on."""
        self.held = held
        self._write = write

    def carried_to(self, first: int) -> int | None:
        """The attempts the blob counts for the batch from ``first`` (None: none)."""
        held = self.held
        if held is None:
            return None
        if held.first < first:
            # Passed (done, or gone with the hub's retention): the next checkpoint drops it.
            # Said at DEBUG: this is every batch's question, and the answer stays the same.
            logger.debug(
                "partition %s: the batch from sequence number %d is passed: its count is done",
                self.partition,
                held.first,
            )
            self.held = None
            return None
        if held.first > first:
            if not self._ahead_said:
                self._ahead_said = True
                logger.info(
                    "partition %s: the checkpoint counts %d attempts of the batch from "
                    "sequence number %d, which comes after this batch (from %d): counted "
                    "when it comes",
                    self.partition,
                    held.attempts,
                    held.first,
                    first,
                )
            return None
        logger.warning(
            "partition %s: the batch from sequence number %d killed a process in the handler "
            "of an earlier owner; %d attempts of it counted so far",
            self.partition,
            first,
            held.attempts,
        )
        return held.attempts

    async def attempting(self, first: int, attempt: int) -> None:
        """Attempt ``attempt`` of the batch from ``first`` is about to be made after a death."""
        await self._put(checkpointblobs.Deaths(first=first, attempts=attempt))

    async def parked(self) -> None:
        """The batch is parked: its next owner tries it again, so the blob counts nothing."""
        if self.held is not None:
            await self._put(None)

    async def _put(self, deaths: checkpointblobs.Deaths | None) -> None:
        if self._write is None:
            return
        try:
            await self._write(deaths)
        except (errors.TransientError, errors.ConfigurationError) as e:
            # OwnershipLost goes on up: the partition is another owner's now.
            logger.warning(
                "partition %s: the deaths of the batch were not written into its checkpoint "
                "(%s): a next owner of the partition will not count this attempt",
                self.partition,
                e,
            )
            return
        self.held = deaths
