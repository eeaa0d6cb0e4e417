"""Owner-checked checkpoints in Blob Storage, in the layout of the Event Hubs SDK's blob store.

The SDK's ``BlobCheckpointStore.update_checkpoint`` writes without any owner check, so a stale
owner can move a checkpoint back after a new owner took over. This store keeps the SDK's blob
names and metadata (``contracts.checkpointblobs``: KEDA's ``blobMetadata`` strategy and the
SDK's EventProcessorClient read our checkpoints, and we read theirs) and adds ``ownerid`` and
``epoch``: an owner *fences* a partition with its epoch, and every later write is conditional
(If-Match on the last ETag) and re-checked on conflict, so a write by a superseded epoch never
lands and a sequence number never moves backwards.

Blob names and metadata are in ``contracts.checkpointblobs``, start positions in
``contracts.startpositions``, the retry budget in ``adapters.retrying``, and the requests (one
blob operation each, through a ``ContainerClient``) in ``adapters.checkpointrequests``: this
module is the ownership protocol on top of them.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Final

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointrequests, checkpointtakeovers, retrying
from eventhub_balancer.contracts import checkpointblobs, startpositions

logger = logging.getLogger(__name__)

#: How long an owner's updates wait on a lease before breaking it. A live fencer holds its
#: lease for one read and one write (milliseconds); one still held after this long belongs to
#: a fencer that died mid-fence. Doubled after every break on the same partition (up to the
#: lease's own length), so that an owner about to be superseded cannot starve a slow fencer.
LEASE_BREAK_AFTER_S: Final = 0.5

#: A checkpoint blob as last read or written; its callers know it by this module's name.
Checkpoint = checkpointrequests.Checkpoint
Position = checkpointblobs.Position
Deaths = checkpointblobs.Deaths


class CheckpointStore:
    """Checkpoints of one (namespace, event hub, consumer group), written by one owner.

    ``container``: a ``ContainerClient`` (`adapters.blobs`, the SDK's retries off) that the
    caller opens and closes. One store serves every partition of one consumer pod; calls on
    one partition are serialized."""

    def __init__(
        self,
        container: Any,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        consumer_group: str,
        owner_id: str,
        retry: retrying.RetryPolicy = retrying.DEFAULT_POLICY,
    ) -> None:
        if not owner_id:
            raise errors.InvalidInput("owner_id", "must not be empty (use the pod name)")
        self.container = container
        self.fully_qualified_namespace = fully_qualified_namespace
        self.eventhub_name = eventhub_name
        self.consumer_group = consumer_group
        self.owner_id = owner_id
        self.retry = retry
        self._rng = random.Random(retry.seed)
        #: Keyed by partition id, so bounded by the hub's partition count: the checkpoint we
        #: hold, the lock serialising its writes, the leases we broke fencing it, and the one
        #: we held until a fence that has not succeeded yet (written back if its blob is gone).
        self._owned: dict[str, Checkpoint] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._lease_breaks: dict[str, int] = {}
        self._held: dict[str, Checkpoint] = {}
        self._blobs = checkpointrequests.CheckpointBlobs(
            container,
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=eventhub_name,
            consumer_group=consumer_group,
            owner_id=owner_id,
        )

    @property
    def prefix(self) -> str:
        return self._blobs.prefix

    def blob_name(self, partition: str) -> str:
        return self._blobs.blob_name(partition)

    def owned(self, partition: str) -> Checkpoint | None:
        """Our last fenced or written checkpoint of a partition, if we hold it."""
        return self._owned.get(partition)

    def use_container(self, container: Any) -> None:
        """Requests go through ``container`` (a new key's) from now on; fences are kept."""
        self.container = container
        self._blobs.use(container)

    def release(self, partition: str) -> None:
        """Forget a partition locally (after its final checkpoint); the blob keeps our epoch,
        which the next owner's higher epoch supersedes."""
        self._owned.pop(partition, None)
        self._held.pop(partition, None)

    # -- operations

    async def read(self, partition: str) -> Checkpoint | None:
        """The stored checkpoint, or None when there is none."""
        budget = self._budget("read", partition)
        return await self._blobs.get(partition, budget)

    async def list(self) -> list[Checkpoint]:
        """Every checkpoint of this consumer group, by partition (numbers sort numerically)."""
        budget = retrying.Budget(
            policy=self.retry, rng=self._rng, operation=f"list checkpoints under {self.prefix}"
        )
        blobs = await self._blobs.list(budget)
        return sorted(blobs, key=lambda c: checkpointblobs.partition_order(c.partition))

    async def seed(
        self,
        partition: str,
        start: startpositions.StartPosition | checkpointblobs.Position = startpositions.EARLIEST,
    ) -> Checkpoint:
        """Create a checkpoint at the start position when there is none, owned by nobody."""
        position = (
            start
            if isinstance(start, checkpointblobs.Position)
            else startpositions.seed_position(start)
        )
        async with self._lock(partition):
            budget = self._budget("seed", partition)
            while True:
                current = await self._blobs.get(partition, budget)
                if current is not None:
                    return current
                created = await self._blobs.create(
                    partition, position, checkpointblobs.NO_EPOCH, budget, owner_id=""
                )
                if created is not None:
                    return created
                await budget.after_conflict("409 BlobAlreadyExists (created concurrently)")

    async def fence(
        self,
        partition: str,
        epoch: int,
        *,
        start: startpositions.StartPosition | checkpointblobs.Position = startpositions.EARLIEST,
    ) -> Checkpoint:
        """Take the partition over with ``epoch``; raises OwnershipLost if a higher epoch holds it.

        A missing checkpoint is created at ``start``; an existing one keeps its position and
        gets our owner id and epoch, written with If-Match on the ETag we read. The first such
        write goes without a lease: in a hand-off the old owner released the partition after
        its final checkpoint, and nobody else writes the blob, so one read and one write take
        it over (a lease costs three more round trips). Only when that write loses (the blob
        changed since the read, or a fencer holds its lease) does the takeover go under a lease
        (`checkpointtakeovers`), as every later attempt does.
        """
        if epoch < 1:
            raise errors.InvalidInput("epoch", f"{epoch} is not positive: epochs start at 1")
        position = (
            start
            if isinstance(start, checkpointblobs.Position)
            else startpositions.seed_position(start)
        )
        async with self._lock(partition):
            held = self._owned.pop(partition, None) or self._held.get(partition)
            if held is not None:
                self._held[partition] = held
            self._lease_breaks.pop(partition, None)
            budget = self._budget(f"fence with epoch {epoch}", partition)
            unleased = True
            while True:
                current = await self._blobs.get(partition, budget)
                if current is None:
                    taken = await checkpointtakeovers.create_missing(
                        self._blobs, partition, epoch, position, held, budget
                    )
                    if taken is None:
                        await budget.after_conflict("409 BlobAlreadyExists (created concurrently)")
                        continue
                elif current.epoch > epoch:
                    raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
                elif current.epoch == epoch and current.owner_id == self.owner_id:
                    taken = current  # already ours: a repeated fence, or one whose answer was lost
                elif unleased:
                    unleased = False
                    taken = await self._blobs.write(
                        partition,
                        current.position,
                        epoch,
                        current.etag,
                        budget,
                        deaths=current.deaths,
                    )
                    if taken is None:
                        continue  # changed or leased since the read: read it again, and lease
                else:
                    taken = await checkpointtakeovers.take_over(
                        self._blobs,
                        partition,
                        epoch,
                        current,
                        budget,
                        release_within=self.retry.attempt_timeout_seconds,
                    )
                    if taken is None:
                        await budget.after_conflict("412/409 (changed or leased since read)")
                        continue
                self._owned[partition] = taken
                self._held.pop(partition, None)
                logger.log(  # fenced again (a restart after a failure): DEBUG
                    logging.DEBUG if taken is current else logging.INFO,
                    "partition %s: fenced with epoch %d at sequence number %d",
                    partition,
                    epoch,
                    taken.sequence_number,
                )
                return taken

    async def update(self, partition: str, *, offset: str, sequence_number: int) -> Checkpoint:
        """Move the checkpoint forward; only the owner that fenced it may.

        Raises OwnershipLost when a higher epoch (or another owner with our epoch) holds the
        blob. A sequence number lower than the stored one is a no-op that returns the stored
        checkpoint: checkpoints never move backwards. The deaths the blob counts are kept
        until the checkpoint passes their batch.
        """
        wanted = checkpointblobs.Position(offset=str(offset), sequence_number=int(sequence_number))
        return await self._update(
            partition, wanted, None, f"update to sequence number {sequence_number}"
        )

    async def record_deaths(self, partition: str, deaths: Deaths | None) -> Checkpoint:
        """Write ``deaths`` (None: no longer any) beside our checkpoint, which stays where it
        is; conditional and fenced as `update`, and raises OwnershipLost as it."""
        return await self._update(partition, None, deaths, "deaths record")

    async def _update(
        self, partition: str, position: Position | None, deaths: Deaths | None, what: str
    ) -> Checkpoint:
        """Write ``position`` with the deaths we hold, or ours as it stands with ``deaths``."""
        async with self._lock(partition):
            mine = self._owned.get(partition)
            if mine is None:
                raise errors.InvalidInput(
                    "partition", f"{partition} is not fenced by {self.owner_id}: call fence() first"
                )
            wanted = mine.position if position is None else position
            if wanted.sequence_number < mine.sequence_number:
                return mine
            if position is not None:
                deaths = mine.deaths
            if deaths is not None and deaths.passed_by(wanted.sequence_number):
                deaths = None
            budget = self._budget(what, partition)
            etag = mine.etag
            blocked_since: float | None = None
            while True:
                written = await self._blobs.write(
                    partition, wanted, mine.epoch, etag, budget, deaths=deaths
                )
                if written is not None:
                    self._owned[partition] = written
                    return written
                current = await self._blobs.get(partition, budget)
                if current is None:
                    # Deleted under us (by hand): recreate it with our epoch (and no deaths).
                    created = await self._blobs.create(partition, wanted, mine.epoch, budget)
                    if created is not None:
                        self._owned[partition] = created
                        return created
                    await budget.after_conflict("409 BlobAlreadyExists (recreated concurrently)")
                    continue
                if current.epoch > mine.epoch or (
                    current.epoch == mine.epoch and current.owner_id != self.owner_id
                ):
                    self._owned.pop(partition, None)
                    raise errors.OwnershipLost(
                        partition, mine.epoch, current.epoch, current.owner_id
                    )
                if current.epoch == mine.epoch and (
                    current.sequence_number > wanted.sequence_number
                    or (
                        current.sequence_number == wanted.sequence_number
                        and current.deaths == deaths
                    )
                ):
                    # Our own write landed (its answer was lost in a retry) or a later one did.
                    self._owned[partition] = current
                    return current
                pause: float | None = None
                unchanged = (
                    checkpointrequests.same_etag(current.etag, etag) and current.epoch == mine.epoch
                )
                if unchanged and current.leased:
                    # Unchanged, ours, and leased: only a fencer's lease refused the write
                    # (412 LeaseIdMissing). Wait for a live one; break a dead one's.
                    now = asyncio.get_running_loop().time()
                    blocked_since = now if blocked_since is None else blocked_since
                    pause = blocked_since + self._lease_grace(partition) - now
                    if pause <= 0 and await self._blobs.break_lease(
                        partition, current.etag, budget
                    ):
                        self._lease_breaks[partition] = self._lease_breaks.get(partition, 0) + 1
                        blocked_since = None
                        continue
                else:
                    blocked_since = None
                if current.epoch < mine.epoch:
                    # Written by someone who does not fence (the SDK's processor): restore our
                    # epoch, and never move its sequence number back.
                    logger.warning(
                        "partition %s: an unfenced writer (owner %r, epoch %d) changed the "
                        "checkpoint; restoring epoch %d",
                        partition,
                        current.owner_id,
                        current.epoch,
                        mine.epoch,
                    )
                    if current.sequence_number > wanted.sequence_number:
                        wanted = current.position
                etag = current.etag
                await budget.after_conflict(
                    "412 ConditionNotMet (changed since our last write)", at_most=pause
                )

    async def rewind(self, partition: str, position: checkpointblobs.Position) -> Checkpoint:
        """Move our checkpoint back: the one write that may, for one past its partition's end
        (`consumer.connections`). Conditional like `update`, and raises OwnershipLost as it."""
        async with self._lock(partition):
            mine = self._owned.get(partition)
            if mine is None:
                raise errors.InvalidInput("partition", f"{partition} is not fenced: fence() first")
            budget = self._budget(f"rewind to {position.sequence_number}", partition)
            etag: str | None = mine.etag
            while True:
                written = await (
                    self._blobs.create(partition, position, mine.epoch, budget)
                    if etag is None  # deleted since (by hand): recreated, as update does
                    else self._blobs.write(partition, position, mine.epoch, etag, budget)
                )
                if written is not None:
                    self._owned[partition] = written
                    return written
                current = await self._blobs.get(partition, budget)
                if current is not None and (
                    current.epoch > mine.epoch
                    or (current.epoch == mine.epoch and current.owner_id != self.owner_id)
                ):
                    self._owned.pop(partition, None)
                    raise errors.OwnershipLost(
                        partition, mine.epoch, current.epoch, current.owner_id
                    )
                etag = None if current is None else current.etag
                await budget.after_conflict("412/409 (changed since our last write)")

    async def keep(self, partition: str) -> Checkpoint | None:
        """Our last checkpoint of a partition, written again when its blob is gone.

        For a release with nothing new to write: a blob deleted since our last write (by
        hand, or with its container) would send the next owner to the start position, though
        we know where the partition stands. One read when the blob is there (it is returned,
        whoever holds it); None when we hold no checkpoint of the partition.
        """
        mine = self._owned.get(partition)
        if mine is None:
            return None
        current = await self.read(partition)
        if current is not None:
            return current
        logger.warning(
            "partition %s: checkpoint blob %s is gone; writing our last checkpoint (sequence "
            "number %d) again",
            partition,
            self.blob_name(partition),
            mine.sequence_number,
        )
        return await self.update(
            partition, offset=mine.offset, sequence_number=mine.sequence_number
        )

    def _budget(self, what: str, partition: str) -> retrying.Budget:
        return retrying.Budget(
            policy=self.retry,
            rng=self._rng,
            operation=f"checkpoint {what} of partition {partition} ({self.blob_name(partition)})",
        )

    def _lease_grace(self, partition: str) -> float:
        breaks = self._lease_breaks.get(partition, 0)
        return float(min(LEASE_BREAK_AFTER_S * 2**breaks, checkpointrequests.LEASE_SECONDS))

    def _lock(self, partition: str) -> asyncio.Lock:
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        return lock
