"""The checkpoint store's requests to Blob Storage: one blob operation each, retried.

Apart from ``adapters.checkpointing`` so that the ownership protocol there (fence, update,
seed) reads as a protocol: each method here sends one request, within the operation's
``retrying.Budget``, and turns the storage service's answers into values: a blob that does
not exist, a lost race or a held lease is None (the caller re-reads), a missing container is
`errors.ConfigurationError`. What is retried, and what an unretried failure is raised as, is
``adapters.retrying``'s to decide.
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime
import logging
from collections.abc import Mapping
from typing import Any, Final

from azure.core import MatchConditions
from azure.core import exceptions as azure_errors
from azure.storage.blob.aio import BlobLeaseClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import retrying
from eventhub_balancer.contracts import checkpointblobs

logger = logging.getLogger(__name__)

#: The shortest blob lease Azure allows; a fencer holds it for a read and a write, and if the
#: fencer dies in between, the blob frees itself after this long unless a higher epoch breaks
#: it first (``CheckpointBlobs.break_lease``).
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
    #: Whether a blob lease was held when this was read (a fencer's, perhaps a dead one's).
    leased: bool = False
    #: The batch after the checkpoint that killed a process, and its attempts so far.
    deaths: checkpointblobs.Deaths | None = None

    @property
    def position(self) -> checkpointblobs.Position:
        return checkpointblobs.Position(offset=self.offset, sequence_number=self.sequence_number)


class CheckpointBlobs:
    """The checkpoint blobs of one (namespace, event hub, consumer group), written as
    ``owner_id``; ``container`` is an ``azure.storage.blob.aio.ContainerClient``."""

    def __init__(
        self,
        container: Any,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        consumer_group: str,
        owner_id: str,
    ) -> None:
        self.container = container
        self.fully_qualified_namespace = fully_qualified_namespace
        self.eventhub_name = eventhub_name
        self.consumer_group = consumer_group
        self.owner_id = owner_id
        self._clients: dict[str, Any] = {}

    def use(self, container: Any) -> None:
        """Send the next requests through ``container``: the same container, reached with
        another key (the blob clients of the one before are dropped with it). Each attempt
        takes its blob client afresh, so a retry after the swap uses the new key too."""
        self.container, self._clients = container, {}

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

    async def acquire_lease(self, partition: str, budget: retrying.Budget) -> Any | None:
        """A lease on the blob, or None when another fencer holds one or the blob is gone."""

        async def acquire() -> Any | None:
            try:
                return await self._blob(partition).acquire_lease(lease_duration=LEASE_SECONDS)
            except (azure_errors.ResourceExistsError, azure_errors.ResourceNotFoundError):
                return None  # leased by another fencer, or deleted: re-read
            except azure_errors.HttpResponseError as e:
                if e.status_code == 412:
                    return None
                raise

        return await retrying.call_with_retries(budget, acquire)

    async def break_lease(self, partition: str, etag: str, budget: retrying.Budget) -> bool:
        """Break the blob's lease at once if the blob still has ``etag``; False if it changed.

        For a fencer that read a lower epoch than its own under somebody's lease: the holder
        is a fencer that died mid-fence (its lease would hold the blob for ``LEASE_SECONDS``)
        or one racing us, and either way every write is conditional on the ETag, so breaking
        costs no safety. The ETag condition makes sure the epoch we compared is still stored.
        A lease already gone counts as broken.
        """

        async def break_now() -> bool:
            try:
                await BlobLeaseClient(self._blob(partition)).break_lease(
                    lease_break_period=0, etag=etag, match_condition=MatchConditions.IfNotModified
                )
            except azure_errors.ResourceNotFoundError as e:
                if retrying.error_code(e) == "ContainerNotFound":
                    raise self.missing_container(e) from e
                return False  # deleted: re-read
            except azure_errors.HttpResponseError as e:
                if e.status_code == 412:
                    return False  # changed since we read it: re-read
                if e.status_code == 409:
                    return True  # LeaseNotPresentWithLeaseOperation: nothing left to break
                raise
            return True

        broken = await retrying.call_with_retries(budget, break_now)
        if broken:
            logger.info("partition %s: broke the lease on %s", partition, self.blob_name(partition))
        return broken

    async def get(self, partition: str, budget: retrying.Budget) -> Checkpoint | None:
        async def properties() -> Any | None:
            try:
                return await self._blob(partition).get_blob_properties()
            except azure_errors.ResourceNotFoundError as e:
                if retrying.error_code(e) == "ContainerNotFound":
                    raise self.missing_container(e) from e
                return None

        props = await retrying.call_with_retries(budget, properties)
        if props is None:
            return None
        checkpoint = self._checkpoint(
            partition, props.metadata or {}, props.etag, props.last_modified
        )
        lease = getattr(props, "lease", None)
        if getattr(lease, "state", None) == "leased":
            checkpoint = dataclasses.replace(checkpoint, leased=True)
        return checkpoint

    async def create(
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
        return await self._create(partition, position, owner, epoch, metadata, budget)

    async def _create(
        self,
        partition: str,
        position: checkpointblobs.Position,
        owner: str,
        epoch: int,
        metadata: dict[str, str],
        budget: retrying.Budget,
    ) -> Checkpoint | None:
        async def upload() -> Any | None:
            try:
                blob = self._blob(partition)  # per attempt: a swapped key's client
                return await blob.upload_blob(b"", overwrite=False, metadata=metadata)
            except azure_errors.ResourceExistsError:
                return None
            except azure_errors.ResourceNotFoundError as e:
                raise self.missing_container(e) from e

        failures = budget.failures
        answer = await retrying.call_with_retries(budget, upload)
        if answer is None:
            return await self._landed(partition, position, owner, epoch, budget, failures)
        return self._written(partition, position, owner, epoch, answer, metadata)

    def _written(
        self,
        partition: str,
        position: checkpointblobs.Position,
        owner: str,
        epoch: int,
        answer: Any,
        metadata: Mapping[str, str],
    ) -> Checkpoint:
        raw_deaths = metadata.get(checkpointblobs.DEATHS_KEY)
        return Checkpoint(
            partition=partition,
            offset=position.offset,
            sequence_number=position.sequence_number,
            owner_id=owner,
            epoch=epoch,
            etag=str(answer["etag"]),
            last_modified=_as_datetime(answer.get("last_modified")),
            deaths=None if raw_deaths is None else checkpointblobs.Deaths.decode(raw_deaths),
        )

    async def write(
        self,
        partition: str,
        position: checkpointblobs.Position,
        epoch: int,
        etag: str,
        budget: retrying.Budget,
        *,
        lease: Any | None = None,
        deaths: checkpointblobs.Deaths | None = None,
    ) -> Checkpoint | None:
        """Set the metadata if the blob still has ``etag`` (else None: the caller re-reads).

        A retry after a lost answer finds a changed ETag (412): the blob is read, and when it
        holds what we wrote, that is our write, which landed (`_landed`). ``deaths`` is
        written unless ``position`` passed its batch.
        """
        metadata = checkpointblobs.encode_metadata(
            position=position, owner_id=self.owner_id, epoch=epoch, deaths=deaths
        )

        async def set_metadata() -> Any | None:
            try:
                return await self._blob(partition).set_blob_metadata(
                    metadata,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                    lease=lease,
                )
            except azure_errors.HttpResponseError as e:
                # 412 (changed, or leased by a fencer: LeaseIdMissing) and 404 re-read; Azurite
                # answers 412 on a missing blob where Azure answers 404.
                if retrying.error_code(e) == "ContainerNotFound":
                    raise self.missing_container(e) from e
                if e.status_code in (404, 412):
                    return None
                if e.status_code == 409 and lease is not None:
                    return None  # LeaseLost: a higher epoch broke our lease; re-read
                raise

        failures = budget.failures
        answer = await retrying.call_with_retries(budget, set_metadata)
        if answer is None:
            landed = await self._landed(partition, position, self.owner_id, epoch, budget, failures)
            kept = None if deaths is None or deaths.passed_by(position.sequence_number) else deaths
            return None if landed is None or landed.deaths != kept else landed
        return self._written(partition, position, self.owner_id, epoch, answer, metadata)

    async def list(self, budget: retrying.Budget) -> builtins.list[Checkpoint]:
        """Every checkpoint under the prefix, in the service's order; others are skipped."""

        async def list_once() -> builtins.list[Checkpoint]:
            found = []
            try:
                async for item in self.container.list_blobs(
                    name_starts_with=self.prefix, include=["metadata"]
                ):
                    partition = checkpointblobs.partition_of(item.name)
                    try:
                        found.append(
                            self._checkpoint(
                                partition, item.metadata or {}, item.etag, item.last_modified
                            )
                        )
                    except errors.InvalidInput as e:
                        logger.warning("skipping blob %s: not a checkpoint (%s)", item.name, e)
            except azure_errors.ResourceNotFoundError as e:
                raise self.missing_container(e) from e
            return found

        return await retrying.call_with_retries(budget, list_once)

    async def _landed(
        self,
        partition: str,
        position: checkpointblobs.Position,
        owner: str,
        epoch: int,
        budget: retrying.Budget,
        failures: int,
    ) -> Checkpoint | None:
        """The blob, when a write refused as a lost race was in fact our own, else None.

        An attempt that got no answer (a timeout, a dropped connection: ``budget.failures``
        grew since ``failures``) may have landed, and its retry is then refused (412, or 409
        for a create). A caller that derives what it writes from what it reads (a reset's
        ``--shift-by``) would otherwise take its own write for somebody else's and apply
        itself twice. Without such an attempt the refusal was a real race: no read is made.
        """
        if budget.failures == failures:
            return None
        current = await self.get(partition, budget)
        if current is None or (current.position, current.owner_id, current.epoch) != (
            position,
            owner,
            epoch,
        ):
            return None
        logger.info(
            "partition %s: a write whose answer was lost had landed (sequence number %d)",
            partition,
            position.sequence_number,
        )
        return current

    def missing_container(self, error: BaseException) -> errors.CheckpointContainerNotFound:
        name = getattr(self.container, "container_name", "?")
        return errors.CheckpointContainerNotFound(
            f"checkpoint container {name!r} does not exist ({retrying.describe(error)}): "
            "create it, or fix checkpointStore.containerName"
        )

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
        if stored.deaths_ignored:
            logger.warning(
                "partition %s: metadata.%s of %s ignored: %s (the deaths it counted are not "
                "carried on)",
                partition,
                checkpointblobs.DEATHS_KEY,
                self.blob_name(partition),
                stored.deaths_ignored,
            )
        return Checkpoint(
            partition=partition,
            offset=stored.position.offset,
            sequence_number=stored.position.sequence_number,
            owner_id=stored.owner_id,
            epoch=stored.epoch,
            etag=str(etag),
            last_modified=last_modified,
            deaths=stored.deaths,
        )

    def _blob(self, partition: str) -> Any:
        blob = self._clients.get(partition)
        if blob is None:
            blob = self._clients[partition] = self.container.get_blob_client(
                self.blob_name(partition)
            )
        return blob


def same_etag(a: str, b: str) -> bool:
    """Listed ETags come unquoted, answered ones quoted."""
    return a.strip('"') == b.strip('"')


def _as_datetime(value: object) -> datetime.datetime | None:
    return value if isinstance(value, datetime.datetime) else None
