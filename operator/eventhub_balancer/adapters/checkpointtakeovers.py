"""A fence's takeover of a checkpoint blob under a short lease, and its creation of a blob
that is missing (`checkpointing`'s fence).

Apart from the store's ownership protocol because they are its exceptions: a fence's first
write goes without a lease, and only when it loses a race does the takeover go through here;
a fence that finds no blob decides here where the partition starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointrequests, retrying
from eventhub_balancer.contracts import checkpointblobs

logger = logging.getLogger(__name__)

#: Said when a worker started again finds its own partition's blob gone.
RESTORED: Final = (
    "partition %s: checkpoint blob %s is gone (deleted by hand, by a lifecycle policy, or with "
    "its container); writing our last checkpoint (sequence number %d) back with epoch %d"
)
#: Said when a new owner finds no blob of a partition that had an owner before it. The epochs
#: go on across a change of the spec's hub, group or checkpoint location, whose new location
#: holds no blob yet: the words say so, as the fence cannot tell the two apart.
GONE: Final = (
    "partition %s: no checkpoint blob %s, though epoch %d says the partition had an owner "
    "before: if it wrote checkpoints here, the blob was deleted (by hand, by a lifecycle "
    "policy, or with its container), unless the spec's Event Hub, consumer group or checkpoint "
    "location changed since (then nothing is lost). Starting from the start position, after "
    "sequence number %d: events since the lost checkpoint are skipped or processed again"
)


async def take_over(
    blobs: checkpointrequests.CheckpointBlobs,
    partition: str,
    epoch: int,
    read: checkpointrequests.Checkpoint,
    budget: retrying.Budget,
    *,
    release_within: float,
) -> checkpointrequests.Checkpoint | None:
    """Write our epoch under a short blob lease (None when the race was lost: re-read).

    An owner that checkpoints back to back would otherwise win every race between our read
    and our conditional write (the first, unleased, attempt of `fence` lost one already);
    under the lease its writes fail (412 LeaseIdMissing) until our epoch is in place, and
    then it sees the higher epoch. A lease held while the blob (as ``read``) has a lower epoch
    than ours is broken at once: it is a fencer's that died mid-fence or is racing us, and
    waiting out its 15 s would stall the takeover. The blob keeps its position and the deaths
    it counts; the lease is released within ``release_within`` seconds, or left to expire.
    """
    lease = await blobs.acquire_lease(partition, budget)
    if (
        lease is None
        and read.epoch < epoch
        and await blobs.break_lease(partition, read.etag, budget)
    ):
        lease = await blobs.acquire_lease(partition, budget)
    if lease is None:
        return None
    try:
        current = await blobs.get(partition, budget)
        if current is None:
            return None
        if current.epoch > epoch:
            raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
        return await blobs.write(
            partition,
            current.position,
            epoch,
            current.etag,
            budget,
            lease=lease,
            deaths=current.deaths,
        )
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(release_within):
                await lease.release()


async def create_missing(
    blobs: checkpointrequests.CheckpointBlobs,
    partition: str,
    epoch: int,
    start: checkpointblobs.Position,
    held: checkpointrequests.Checkpoint | None,
    budget: retrying.Budget,
) -> checkpointrequests.Checkpoint | None:
    """Create the blob a fence found missing (None when it was created concurrently: re-read).

    ``held`` is our own last checkpoint of the partition at this ``epoch`` (a worker started
    again, its blob deleted meanwhile, with its container say): the position is written back,
    not ``start``, which with "latest" would skip every event enqueued since. Without it the
    blob goes at ``start``; an epoch above 1 says the partition had an owner before, whose
    checkpoints, if it wrote any, are gone: said at WARNING, with where the partition starts.
    """
    name = blobs.blob_name(partition)
    if held is not None and held.epoch == epoch:
        logger.warning(RESTORED, partition, name, held.sequence_number, epoch)
        return await blobs.create(partition, held.position, epoch, budget)
    if epoch > 1:
        logger.warning(GONE, partition, name, epoch, start.sequence_number)
    return await blobs.create(partition, start, epoch, budget)
