"""Owner-checked checkpoints in Blob Storage, in the layout of the Event Hubs SDK's blob store.

The SDK's ``BlobCheckpointStore.update_checkpoint`` writes without any owner check, so a stale
owner can move a checkpoint back after a new owner took over. This store keeps the SDK's blob
names and metadata (``contracts.checkpointblobs``: KEDA's ``blobMetadata`` strategy and the
SDK's EventProcessorClient read our checkpoints, and we read theirs) and adds ``ownerid`` and
``epoch``: an owner *fences* a partition with its epoch, and every later write is conditional
(If-Match on the last ETag) and re-checked on conflict, so a write by a superseded epoch never
lands and a sequence number never moves backwards.

The pure parts live beside it: blob names and metadata in ``contracts.checkpointblobs``, start
positions and seeds in ``contracts.startpositions``, the retry budget in ``adapters.retrying``.
This module is the store itself, talking to Blob Storage through an
``azure.storage.blob.aio.ContainerClient``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime
import logging
import random
from collections.abc import Mapping
from typing import Any, Final

from azure.core import MatchConditions
from azure.core import exceptions as azure_errors

from eventhub_balancer import errors
from eventhub_balancer.adapters import retrying
from eventhub_balancer.contracts import checkpointblobs, startpositions

logger = logging.getLogger(__name__)

#: The shortest blob lease Azure allows; a fencer holds it for a read and a write, and if the
#: fencer dies in between, the blob frees itself after this long.
LEASE_SECONDS: Final = 15


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A partition's checkpoint blob as last read or written."""

    partition: str
    offset: str
    sequence_number: int
    owner_id: str
    epoch: int
    etag: str
    last_modified: datetime.datetime | None

    @property
    def position(self) -> checkpointblobs.Position:
        return checkpointblobs.Position(offset=self.offset, sequence_number=self.sequence_number)


class CheckpointStore:
    """Checkpoints of one (namespace, event hub, consumer group), written by one owner.

    ``container`` is an ``azure.storage.blob.aio.ContainerClient`` (built by ``adapters.blobs``
    with the SDK's own retries off); the caller opens and closes it. One store instance serves
    all partitions of one consumer pod; calls on the same partition are serialized.
    """

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
        self._owned: dict[str, Checkpoint] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._blobs: dict[str, Any] = {}

    # -- names

    @property
    def prefix(self) -> str:
        return checkpointblobs.blob_prefix(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
        )

    def blob_name(self, partition: str) -> str:
        return checkpointblobs.blob_name(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
            partition=partition,
        )

    def owned(self, partition: str) -> Checkpoint | None:
        """Our last fenced or written checkpoint of a partition, if we hold it."""
        return self._owned.get(partition)

    def release(self, partition: str) -> None:
        """Forget a partition locally (after its final checkpoint); the blob keeps our epoch,
        which the next owner's higher epoch supersedes."""
        self._owned.pop(partition, None)

    # -- operations

    async def read(self, partition: str) -> Checkpoint | None:
        """The stored checkpoint, or None when there is none."""
        budget = self._budget("read", partition)
        return await self._get(partition, budget)

    async def list(self) -> list[Checkpoint]:
        """Every checkpoint of this consumer group, by partition (numbers sort numerically)."""
        budget = retrying.Budget(
            policy=self.retry, rng=self._rng, operation=f"list checkpoints under {self.prefix}"
        )
        while True:
            try:
                blobs = await budget.call(self._list_once)
            except azure_errors.ResourceNotFoundError as e:
                raise self._missing_container(e) from e
            except Exception as e:
                retrying.raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            return sorted(blobs, key=lambda c: _partition_key(c.partition))

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
                current = await self._get(partition, budget)
                if current is not None:
                    return current
                created = await self._create(
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
        gets our owner id and epoch, written with If-Match on the ETag we read.
        """
        if epoch < 1:
            raise errors.InvalidInput("epoch", f"{epoch} is not positive: epochs start at 1")
        position = (
            start
            if isinstance(start, checkpointblobs.Position)
            else startpositions.seed_position(start)
        )
        async with self._lock(partition):
            self._owned.pop(partition, None)
            budget = self._budget(f"fence with epoch {epoch}", partition)
            while True:
                current = await self._get(partition, budget)
                if current is None:
                    taken = await self._create(partition, position, epoch, budget)
                    if taken is None:
                        await budget.after_conflict("409 BlobAlreadyExists (created concurrently)")
                        continue
                elif current.epoch > epoch:
                    raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
                elif current.epoch == epoch and current.owner_id == self.owner_id:
                    taken = current  # already ours: a repeated fence, or one whose answer was lost
                else:
                    taken = await self._take_over(partition, epoch, budget)
                    if taken is None:
                        await budget.after_conflict("412/409 (changed or leased since read)")
                        continue
                self._owned[partition] = taken
                logger.info(
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
        checkpoint: checkpoints never move backwards.
        """
        async with self._lock(partition):
            mine = self._owned.get(partition)
            if mine is None:
                raise errors.InvalidInput(
                    "partition", f"{partition} is not fenced by {self.owner_id}: call fence() first"
                )
            if sequence_number < mine.sequence_number:
                return mine
            wanted = checkpointblobs.Position(
                offset=str(offset), sequence_number=int(sequence_number)
            )
            budget = self._budget(f"update to sequence number {sequence_number}", partition)
            etag = mine.etag
            while True:
                written = await self._write(partition, wanted, mine.epoch, etag, budget)
                if written is not None:
                    self._owned[partition] = written
                    return written
                current = await self._get(partition, budget)
                if current is None:
                    # Deleted under us (by hand): recreate it with our epoch.
                    created = await self._create(partition, wanted, mine.epoch, budget)
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
                if (
                    current.epoch == mine.epoch
                    and current.sequence_number >= wanted.sequence_number
                ):
                    # Our own write landed (its answer was lost in a retry) or a later one did.
                    self._owned[partition] = current
                    return current
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
                await budget.after_conflict("412 ConditionNotMet (changed since our last write)")

    async def _take_over(
        self, partition: str, epoch: int, budget: retrying.Budget
    ) -> Checkpoint | None:
        """Write our epoch under a short blob lease (None when the race was lost: re-read).

        An owner that checkpoints back to back would otherwise win every race between our read
        and our conditional write; under the lease its writes fail (412 LeaseIdMissing) until
        our epoch is in place, and then it sees the higher epoch.
        """
        lease = await self._acquire_lease(partition, budget)
        if lease is None:
            return None
        try:
            current = await self._get(partition, budget)
            if current is None:
                return None
            if current.epoch > epoch:
                raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)
            return await self._write(
                partition, current.position, epoch, current.etag, budget, lease=lease
            )
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.retry.attempt_timeout_seconds):
                    await lease.release()

    # -- one request each, with retries on transient failures

    async def _acquire_lease(self, partition: str, budget: retrying.Budget) -> Any | None:
        blob = self._blob(partition)
        while True:
            try:
                return await budget.call(lambda: blob.acquire_lease(lease_duration=LEASE_SECONDS))
            except (azure_errors.ResourceExistsError, azure_errors.ResourceNotFoundError):
                return None  # leased by another fencer, or deleted: re-read
            except azure_errors.HttpResponseError as e:
                if e.status_code == 412:
                    return None
                retrying.raise_unless_transient(e, budget)
                await budget.after_failure(e)
            except Exception as e:
                retrying.raise_unless_transient(e, budget)
                await budget.after_failure(e)

    async def _get(self, partition: str, budget: retrying.Budget) -> Checkpoint | None:
        blob = self._blob(partition)
        while True:
            try:
                props = await budget.call(blob.get_blob_properties)
            except azure_errors.ResourceNotFoundError as e:
                if retrying.error_code(e) == "ContainerNotFound":
                    raise self._missing_container(e) from e
                return None
            except Exception as e:
                retrying.raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            return self._checkpoint(
                partition, props.metadata or {}, props.etag, props.last_modified
            )

    async def _create(
        self,
        partition: str,
        position: checkpointblobs.Position,
        epoch: int,
        budget: retrying.Budget,
        *,
        owner_id: str | None = None,
    ) -> Checkpoint | None:
        """Create the 0-byte blob unless it exists (then None: the caller re-reads)."""
        owner = self.owner_id if owner_id is None else owner_id
        metadata = checkpointblobs.encode_metadata(position=position, owner_id=owner, epoch=epoch)
        blob = self._blob(partition)
        while True:
            try:
                answer = await budget.call(
                    lambda: blob.upload_blob(b"", overwrite=False, metadata=metadata)
                )
            except azure_errors.ResourceExistsError:
                return None
            except azure_errors.ResourceNotFoundError as e:
                raise self._missing_container(e) from e
            except Exception as e:
                retrying.raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            return Checkpoint(
                partition=partition,
                offset=position.offset,
                sequence_number=position.sequence_number,
                owner_id=owner,
                epoch=epoch,
                etag=str(answer["etag"]),
                last_modified=_as_datetime(answer.get("last_modified")),
            )

    async def _write(
        self,
        partition: str,
        position: checkpointblobs.Position,
        epoch: int,
        etag: str,
        budget: retrying.Budget,
        *,
        lease: Any | None = None,
    ) -> Checkpoint | None:
        """Set the metadata if the blob still has ``etag`` (else None: the caller re-reads).

        A retry after a lost answer finds a changed ETag (412) and the caller's re-read then
        sees our own write.
        """
        metadata = checkpointblobs.encode_metadata(
            position=position, owner_id=self.owner_id, epoch=epoch
        )
        blob = self._blob(partition)
        while True:
            try:
                answer = await budget.call(
                    lambda: blob.set_blob_metadata(
                        metadata,
                        etag=etag,
                        match_condition=MatchConditions.IfNotModified,
                        lease=lease,
                    )
                )
            except azure_errors.HttpResponseError as e:
                # 412 (changed, or leased by a fencer: LeaseIdMissing) and 404 re-read; Azurite
                # answers 412 on a missing blob where Azure answers 404.
                if retrying.error_code(e) == "ContainerNotFound":
                    raise self._missing_container(e) from e
                if e.status_code in (404, 412):
                    return None
                retrying.raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            except Exception as e:
                retrying.raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            return Checkpoint(
                partition=partition,
                offset=position.offset,
                sequence_number=position.sequence_number,
                owner_id=self.owner_id,
                epoch=epoch,
                etag=str(answer["etag"]),
                last_modified=_as_datetime(answer.get("last_modified")),
            )

    async def _list_once(self) -> builtins.list[Checkpoint]:
        found = []
        async for item in self.container.list_blobs(
            name_starts_with=self.prefix, include=["metadata"]
        ):
            partition = checkpointblobs.partition_of(item.name)
            try:
                found.append(
                    self._checkpoint(partition, item.metadata or {}, item.etag, item.last_modified)
                )
            except errors.InvalidInput as e:
                logger.warning("skipping blob %s: not a checkpoint (%s)", item.name, e)
        return found

    # -- helpers

    def _checkpoint(
        self,
        partition: str,
        metadata: Mapping[str, str],
        etag: str,
        last_modified: datetime.datetime | None,
    ) -> Checkpoint:
        try:
            stored = checkpointblobs.decode_metadata(metadata)
        except errors.InvalidInput as e:
            raise errors.InvalidInput(
                f"blob {self.blob_name(partition)} metadata.{e.field}", e.problem
            ) from e
        return Checkpoint(
            partition=partition,
            offset=stored.position.offset,
            sequence_number=stored.position.sequence_number,
            owner_id=stored.owner_id,
            epoch=stored.epoch,
            etag=str(etag),
            last_modified=last_modified,
        )

    def _budget(self, what: str, partition: str) -> retrying.Budget:
        return retrying.Budget(
            policy=self.retry,
            rng=self._rng,
            operation=f"checkpoint {what} of partition {partition} ({self.blob_name(partition)})",
        )

    def _blob(self, partition: str) -> Any:
        blob = self._blobs.get(partition)
        if blob is None:
            blob = self._blobs[partition] = self.container.get_blob_client(
                self.blob_name(partition)
            )
        return blob

    def _lock(self, partition: str) -> asyncio.Lock:
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        return lock

    def _missing_container(self, error: BaseException) -> errors.ConfigurationError:
        name = getattr(self.container, "container_name", "?")
        return errors.ConfigurationError(
            f"checkpoint container {name!r} does not exist ({retrying.describe(error)}): "
            "create it, or fix checkpointStore.containerName"
        )


def _partition_key(partition: str) -> tuple[int, int | str]:
    return (0, int(partition)) if partition.isdigit() else (1, partition)


def _as_datetime(value: object) -> datetime.datetime | None:
    return value if isinstance(value, datetime.datetime) else None
