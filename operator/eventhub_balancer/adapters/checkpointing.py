"""Owner-checked checkpoints in Blob Storage, in the layout of the Event Hubs SDK's blob store.

The SDK's ``BlobCheckpointStore.update_checkpoint`` writes without any owner check, so a stale
owner can move a checkpoint back after a new owner took over. This store keeps the SDK's blob
names and metadata (so KEDA's ``blobMetadata`` strategy and the SDK's EventProcessorClient read
our checkpoints, and we read theirs) and adds ``ownerid`` and ``epoch``: an owner *fences* a
partition with its epoch, and every later write is conditional (If-Match on the last ETag) and
re-checked on conflict, so a write by a superseded epoch never lands and a sequence number
never moves backwards.

Semantics of a checkpoint (those of the SDK and KEDA): ``sequencenumber`` and ``offset`` name
the *last processed* event; a consumer resumes after it. "Nothing processed yet" is
``sequencenumber=-1, offset=-1``: the SDK starts after offset ``-1``, the start of the
partition, and KEDA computes the lag ``last_enqueued - (-1)``, i.e. every event since 0.

Only the pure parts (names, metadata, start positions, the retry policy) are free of I/O; the
store itself talks to Blob Storage through an ``azure.storage.blob.aio.ContainerClient``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from azure.core import MatchConditions
from azure.core import exceptions as azure_errors

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
# Blob names and metadata: identical to azure-eventhub-checkpointstoreblob(-aio) 1.2.

CHECKPOINT: Final = "checkpoint"
#: The SDK's ownership blobs live beside the checkpoints; we never write them, only skip them.
OWNERSHIP: Final = "ownership"

OFFSET_KEY: Final = "offset"
SEQUENCE_NUMBER_KEY: Final = "sequencenumber"
OWNER_ID_KEY: Final = "ownerid"
EPOCH_KEY: Final = "epoch"

#: The Event Hubs offset before the first event: the SDK starts *after* a checkpoint's offset.
OFFSET_BEFORE_FIRST: Final = "-1"
#: No event processed yet: KEDA's lag is then ``last_enqueued + 1``, the whole partition.
NOTHING_PROCESSED: Final = -1
#: The offset of a checkpoint seeded from a sequence number, whose offset we do not know: the
#: SDK's processor treats an empty offset as "no checkpoint offset" and uses its own start
#: position; our consumer resumes from the sequence number.
OFFSET_UNKNOWN: Final = ""
#: The epoch of blobs written by the SDK or seeded without an owner: any fence supersedes it.
NO_EPOCH: Final = 0


def blob_prefix(
    *,
    fully_qualified_namespace: str,
    eventhub_name: str,
    consumer_group: str,
    kind: str = CHECKPOINT,
) -> str:
    """``<namespace>/<hub>/<consumer group>/<kind>/``, lower-cased as the SDK and KEDA do."""
    return f"{fully_qualified_namespace}/{eventhub_name}/{consumer_group}/{kind}/".lower()


def blob_name(
    *,
    fully_qualified_namespace: str,
    eventhub_name: str,
    consumer_group: str,
    partition: str,
    kind: str = CHECKPOINT,
) -> str:
    """The blob of one partition's checkpoint (or the SDK's ownership record)."""
    prefix = blob_prefix(
        fully_qualified_namespace=fully_qualified_namespace,
        eventhub_name=eventhub_name,
        consumer_group=consumer_group,
        kind=kind,
    )
    return f"{prefix}{partition}".lower()


def partition_of(name: str) -> str:
    """The partition id at the end of a checkpoint blob's name."""
    return name.rsplit("/", 1)[-1]


@dataclasses.dataclass(frozen=True)
class Position:
    """Where processing of a partition stands: the last processed event."""

    offset: str
    sequence_number: int


NOTHING_PROCESSED_POSITION: Final = Position(
    offset=OFFSET_BEFORE_FIRST, sequence_number=NOTHING_PROCESSED
)


@dataclasses.dataclass(frozen=True)
class StoredMetadata:
    """The decoded metadata of a checkpoint blob."""

    position: Position
    owner_id: str
    epoch: int


def encode_metadata(*, position: Position, owner_id: str, epoch: int) -> dict[str, str]:
    """Blob metadata: the SDK's two keys (strings, sequence number as an int) plus ours."""
    metadata = {
        OFFSET_KEY: str(position.offset),
        SEQUENCE_NUMBER_KEY: str(int(position.sequence_number)),
    }
    if owner_id or epoch:
        metadata[OWNER_ID_KEY] = owner_id
        metadata[EPOCH_KEY] = str(int(epoch))
    return metadata


def decode_metadata(metadata: Mapping[str, str]) -> StoredMetadata:
    """Read what the SDK, KEDA's tools or this store wrote; missing owner fields mean epoch 0.

    Keys are matched case-insensitively: KEDA also accepts ``Sequencenumber`` and ``Offset``.
    """
    lowered = {k.lower(): v for k, v in metadata.items()}
    raw_sequence = lowered.get(SEQUENCE_NUMBER_KEY)
    if raw_sequence is None:
        raise errors.InvalidInput(SEQUENCE_NUMBER_KEY, "missing from the checkpoint's metadata")
    try:
        sequence_number = int(raw_sequence)
    except ValueError:
        raise errors.InvalidInput(
            SEQUENCE_NUMBER_KEY, f"{raw_sequence!r} is not an integer"
        ) from None
    raw_epoch = lowered.get(EPOCH_KEY, "") or str(NO_EPOCH)
    try:
        epoch = int(raw_epoch)
    except ValueError:
        raise errors.InvalidInput(EPOCH_KEY, f"{raw_epoch!r} is not an integer") from None
    return StoredMetadata(
        position=Position(
            offset=lowered.get(OFFSET_KEY, OFFSET_UNKNOWN), sequence_number=sequence_number
        ),
        owner_id=lowered.get(OWNER_ID_KEY, ""),
        epoch=epoch,
    )


# ---------------------------------------------------------------------------------------------
# Start positions (the CR's spec.startPosition) and the checkpoint they seed.


@dataclasses.dataclass(frozen=True)
class Earliest:
    """Start at the oldest retained event."""


@dataclasses.dataclass(frozen=True)
class Latest:
    """Start after the last event enqueued when the partition is first taken."""


@dataclasses.dataclass(frozen=True)
class FromSequenceNumber:
    """Start at this sequence number (it is the first event processed)."""

    sequence_number: int


@dataclasses.dataclass(frozen=True)
class FromEnqueuedTime:
    """Start at the first event enqueued at or after this time."""

    enqueued_time: datetime.datetime


StartPosition = Earliest | Latest | FromSequenceNumber | FromEnqueuedTime

EARLIEST: Final = Earliest()
LATEST: Final = Latest()


def parse_start_position(value: object, *, field: str = "startPosition") -> StartPosition:
    """``earliest | latest | {sequenceNumber: N} | {enqueuedTime: RFC3339}`` as in the CR."""
    if value == "earliest":
        return EARLIEST
    if value == "latest":
        return LATEST
    if isinstance(value, Mapping) and len(value) == 1:
        if "sequenceNumber" in value:
            number = value["sequenceNumber"]
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise errors.InvalidInput(
                    f"{field}.sequenceNumber", f"{number!r} is not a non-negative integer"
                )
            return FromSequenceNumber(sequence_number=number)
        if "enqueuedTime" in value:
            raw = value["enqueuedTime"]
            when = _parse_rfc3339(raw, field=f"{field}.enqueuedTime")
            return FromEnqueuedTime(enqueued_time=when)
    raise errors.InvalidInput(
        field,
        f"{value!r} is not one of: earliest, latest, {{sequenceNumber: N}}, "
        "{enqueuedTime: RFC3339 time}",
    )


def _parse_rfc3339(raw: object, *, field: str) -> datetime.datetime:
    if isinstance(raw, datetime.datetime):
        when = raw
    elif isinstance(raw, str):
        try:
            when = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise errors.InvalidInput(field, f"{raw!r} is not an RFC 3339 time") from None
    else:
        raise errors.InvalidInput(field, f"{raw!r} is not an RFC 3339 time")
    if when.tzinfo is None:
        raise errors.InvalidInput(field, f"{raw!r} has no time zone (e.g. end it with Z)")
    return when


@dataclasses.dataclass(frozen=True)
class PartitionBounds:
    """What Event Hubs says about a partition (``get_partition_properties``)."""

    beginning_sequence_number: int
    last_sequence_number: int
    last_offset: str
    empty: bool


def seed_position(start: StartPosition, *, bounds: PartitionBounds | None = None) -> Position:
    """The checkpoint to create for a partition that has none, so that KEDA reads its lag right.

    ``earliest`` seeds "nothing processed" (just before the first retained event when the
    bounds are known); ``latest`` needs the bounds (the last event counts as processed);
    ``{sequenceNumber: N}`` seeds N - 1; an enqueued time must be resolved by the caller
    (the first event at that time gives a sequence number) because only a receive can.
    """
    match start:
        case Earliest():
            if bounds is None:
                return NOTHING_PROCESSED_POSITION
            if bounds.empty:
                return Position(
                    offset=OFFSET_BEFORE_FIRST, sequence_number=bounds.last_sequence_number
                )
            return Position(
                offset=OFFSET_BEFORE_FIRST, sequence_number=bounds.beginning_sequence_number - 1
            )
        case Latest():
            if bounds is None:
                raise errors.ConfigurationError(
                    "startPosition latest: the partition's last sequence number is needed to seed "
                    "its checkpoint (pass the partition bounds from Event Hubs)"
                )
            if bounds.empty:
                return Position(
                    offset=OFFSET_BEFORE_FIRST, sequence_number=bounds.last_sequence_number
                )
            return Position(offset=bounds.last_offset, sequence_number=bounds.last_sequence_number)
        case FromSequenceNumber(sequence_number=number):
            if number == 0:
                return NOTHING_PROCESSED_POSITION
            return Position(offset=OFFSET_UNKNOWN, sequence_number=number - 1)
        case FromEnqueuedTime(enqueued_time=when):
            raise errors.ConfigurationError(
                f"startPosition enqueuedTime {when.isoformat()}: resolve it to the sequence number "
                "of the first event at that time and seed from that sequence number"
            )


# ---------------------------------------------------------------------------------------------
# Retries: one bounded budget per operation.


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How long an operation keeps trying through transient failures.

    The blob client's own retries are off (see ``adapters.blobs``) so that this budget is the
    only one: ``attempts`` requests (reads and writes of one operation together) within
    ``budget_seconds``, each bounded by ``attempt_timeout_seconds``, with full-jitter
    exponential backoff between transient failures. Conflicts (412/409) are re-read at once.
    """

    attempts: int = 10
    budget_seconds: float = 15.0
    attempt_timeout_seconds: float = 5.0
    base_delay_seconds: float = 0.05
    max_delay_seconds: float = 2.0
    #: A seed makes the jitter reproducible (tests, benchmarks); None seeds from the OS.
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise errors.InvalidInput("retry.attempts", f"{self.attempts} is less than 1")
        if self.budget_seconds <= 0 or self.attempt_timeout_seconds <= 0:
            raise errors.InvalidInput("retry", "budget and attempt timeout must be positive")

    def backoff(self, *, failures: int, rng: random.Random) -> float:
        """Full jitter: uniform in [0, min(max, base * 2^(failures-1))]."""
        ceiling = min(self.max_delay_seconds, self.base_delay_seconds * 2 ** max(failures - 1, 0))
        return rng.uniform(0.0, ceiling)


#: The shortest blob lease Azure allows; a fencer holds it for a read and a write, and if the
#: fencer dies in between, the blob frees itself after this long.
LEASE_SECONDS: Final = 15

#: The first pause after a lost race; doubled per conflict up to the policy's max delay.
CONFLICT_DELAY_S: Final = 0.005

#: Status codes that may pass with time: timeouts, throttling, server errors.
TRANSIENT_STATUS: Final = frozenset({408, 429, 500, 502, 503, 504})


def is_transient(error: BaseException) -> bool:
    """Whether retrying the same request may succeed."""
    if isinstance(error, TimeoutError | ConnectionError | OSError):
        return True
    if isinstance(error, azure_errors.ServiceRequestError | azure_errors.ServiceResponseError):
        return True
    if isinstance(error, azure_errors.IncompleteReadError):
        return True
    if isinstance(error, azure_errors.HttpResponseError):
        return error.status_code in TRANSIENT_STATUS
    return False


def error_code(error: BaseException) -> str | None:
    """The storage service's ``x-ms-error-code`` (the SDK sets it on its errors at run time)."""
    code = getattr(error, "error_code", None)
    return None if code is None else str(getattr(code, "value", code))


def describe(error: BaseException) -> str:
    """One line about a failure, without request details that could carry a SAS token."""
    if isinstance(error, azure_errors.HttpResponseError) and error.status_code is not None:
        raw = error_code(error)
        code = f" {raw}" if raw else ""
        return f"HTTP {error.status_code}{code} ({type(error).__name__})"
    if isinstance(error, TimeoutError):
        return "timed out"
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:300]


class _Budget:
    """The attempts and time left to one store operation."""

    def __init__(self, *, policy: RetryPolicy, rng: random.Random, operation: str) -> None:
        self.policy = policy
        self.rng = rng
        self.operation = operation
        self.started = time.monotonic()
        self.attempts = 0
        self.failures = 0
        self.conflicts = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def attempt_timeout(self) -> float:
        left = self.policy.budget_seconds - self.elapsed()
        # Never below a sliver: a last attempt must be able to complete at all.
        return max(0.05, min(self.policy.attempt_timeout_seconds, left))

    def _exhausted(self) -> bool:
        return self.attempts >= self.policy.attempts or self.elapsed() >= self.policy.budget_seconds

    def _give_up(self, last: str, cause: BaseException | None) -> errors.CheckpointStoreUnreachable:
        error = errors.CheckpointStoreUnreachable(
            f"{self.operation}: gave up after {self.attempts} attempt(s) over "
            f"{self.elapsed():.1f} s (budget {self.policy.attempts} attempts, "
            f"{self.policy.budget_seconds:g} s); last error: {last}"
        )
        error.__cause__ = cause
        return error

    async def after_failure(self, error: BaseException) -> None:
        """Back off before the next attempt, or raise when the budget is spent."""
        self.failures += 1
        if self._exhausted():
            raise self._give_up(describe(error), error)
        delay = min(
            self.policy.backoff(failures=self.failures, rng=self.rng),
            max(0.0, self.policy.budget_seconds - self.elapsed()),
        )
        logger.debug("%s: %s; retrying in %.3f s", self.operation, describe(error), delay)
        await asyncio.sleep(delay)

    async def after_conflict(self, what: str) -> None:
        """A lost race (412/409): re-read after a short jittered pause, within the same budget.

        The pause lets a fencer's lease pass instead of spending the attempts at once.
        """
        self.conflicts += 1
        if self._exhausted():
            raise self._give_up(what, None)
        ceiling = min(self.policy.max_delay_seconds, CONFLICT_DELAY_S * 2 ** (self.conflicts - 1))
        await asyncio.sleep(self.rng.uniform(0.0, ceiling))

    async def call(self, request: Callable[[], Awaitable[T]]) -> T:
        self.attempts += 1
        async with asyncio.timeout(self.attempt_timeout()):
            return await request()


# ---------------------------------------------------------------------------------------------
# The store.


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
    def position(self) -> Position:
        return Position(offset=self.offset, sequence_number=self.sequence_number)


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
        retry: RetryPolicy = RetryPolicy(),
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
        return blob_prefix(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
        )

    def blob_name(self, partition: str) -> str:
        return blob_name(
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
        budget = _Budget(
            policy=self.retry, rng=self._rng, operation=f"list checkpoints under {self.prefix}"
        )
        while True:
            try:
                blobs = await budget.call(self._list_once)
            except azure_errors.ResourceNotFoundError as e:
                raise self._missing_container(e) from e
            except Exception as e:
                self._raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            return sorted(blobs, key=lambda c: _partition_key(c.partition))

    async def seed(self, partition: str, start: StartPosition | Position = EARLIEST) -> Checkpoint:
        """Create a checkpoint at the start position when there is none, owned by nobody."""
        position = start if isinstance(start, Position) else seed_position(start)
        async with self._lock(partition):
            budget = self._budget("seed", partition)
            while True:
                current = await self._get(partition, budget)
                if current is not None:
                    return current
                created = await self._create(partition, position, NO_EPOCH, budget, owner_id="")
                if created is not None:
                    return created
                await budget.after_conflict("409 BlobAlreadyExists (created concurrently)")

    async def fence(
        self, partition: str, epoch: int, *, start: StartPosition | Position = EARLIEST
    ) -> Checkpoint:
        """Take the partition over with ``epoch``; raises OwnershipLost if a higher epoch holds it.

        A missing checkpoint is created at ``start``; an existing one keeps its position and
        gets our owner id and epoch, written with If-Match on the ETag we read.
        """
        if epoch < 1:
            raise errors.InvalidInput("epoch", f"{epoch} is not positive: epochs start at 1")
        position = start if isinstance(start, Position) else seed_position(start)
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
            wanted = Position(offset=str(offset), sequence_number=int(sequence_number))
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

    async def _take_over(self, partition: str, epoch: int, budget: _Budget) -> Checkpoint | None:
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

    async def _acquire_lease(self, partition: str, budget: _Budget) -> Any | None:
        blob = self._blob(partition)
        while True:
            try:
                return await budget.call(lambda: blob.acquire_lease(lease_duration=LEASE_SECONDS))
            except (azure_errors.ResourceExistsError, azure_errors.ResourceNotFoundError):
                return None  # leased by another fencer, or deleted: re-read
            except azure_errors.HttpResponseError as e:
                if e.status_code == 412:
                    return None
                self._raise_unless_transient(e, budget)
                await budget.after_failure(e)
            except Exception as e:
                self._raise_unless_transient(e, budget)
                await budget.after_failure(e)

    async def _get(self, partition: str, budget: _Budget) -> Checkpoint | None:
        blob = self._blob(partition)
        while True:
            try:
                props = await budget.call(blob.get_blob_properties)
            except azure_errors.ResourceNotFoundError as e:
                if error_code(e) == "ContainerNotFound":
                    raise self._missing_container(e) from e
                return None
            except Exception as e:
                self._raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            return self._checkpoint(
                partition, props.metadata or {}, props.etag, props.last_modified
            )

    async def _create(
        self,
        partition: str,
        position: Position,
        epoch: int,
        budget: _Budget,
        *,
        owner_id: str | None = None,
    ) -> Checkpoint | None:
        """Create the 0-byte blob unless it exists (then None: the caller re-reads)."""
        owner = self.owner_id if owner_id is None else owner_id
        metadata = encode_metadata(position=position, owner_id=owner, epoch=epoch)
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
                self._raise_unless_transient(e, budget)
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
        position: Position,
        epoch: int,
        etag: str,
        budget: _Budget,
        *,
        lease: Any | None = None,
    ) -> Checkpoint | None:
        """Set the metadata if the blob still has ``etag`` (else None: the caller re-reads).

        A retry after a lost answer finds a changed ETag (412) and the caller's re-read then
        sees our own write.
        """
        metadata = encode_metadata(position=position, owner_id=self.owner_id, epoch=epoch)
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
                if error_code(e) == "ContainerNotFound":
                    raise self._missing_container(e) from e
                if e.status_code in (404, 412):
                    return None
                self._raise_unless_transient(e, budget)
                await budget.after_failure(e)
                continue
            except Exception as e:
                self._raise_unless_transient(e, budget)
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
            partition = partition_of(item.name)
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
            stored = decode_metadata(metadata)
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

    def _budget(self, what: str, partition: str) -> _Budget:
        return _Budget(
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
            f"checkpoint container {name!r} does not exist ({describe(error)}): create it, "
            "or fix checkpointStore.containerName"
        )

    def _raise_unless_transient(self, error: Exception, budget: _Budget) -> None:
        if is_transient(error):
            return
        if isinstance(error, azure_errors.ClientAuthenticationError):
            raise errors.ConfigurationError(
                f"{budget.operation}: the blob service rejected our credentials "
                f"({describe(error)}); check the checkpoint store's connection string "
                "or workload identity"
            ) from error
        if isinstance(error, azure_errors.AzureError):
            raise errors.CheckpointStoreUnreachable(
                f"{budget.operation}: the blob service refused the request ({describe(error)})"
            ) from error
        raise error


def _partition_key(partition: str) -> tuple[int, int | str]:
    return (0, int(partition)) if partition.isdigit() else (1, partition)


def _as_datetime(value: object) -> datetime.datetime | None:
    return value if isinstance(value, datetime.datetime) else None
