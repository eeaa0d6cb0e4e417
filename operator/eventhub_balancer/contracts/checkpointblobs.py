"""The names and metadata of checkpoint blobs: the layout the pods, the operator and others share.

Consumer pods write these blobs, the operator reads them (their epochs are a floor for the
epochs it gives out), and outside tools read and write the same blobs: the names and metadata
are identical to azure-eventhub-checkpointstoreblob(-aio) 1.2, so KEDA's ``blobMetadata``
strategy and the SDK's EventProcessorClient read our checkpoints and we read theirs. We add
``ownerid`` and ``epoch``, and ``ehbdeaths`` while a batch is killing the processes that run
it (`Deaths`). Pure data code: the store that reads and writes these blobs is
``adapters.checkpointing``.

Semantics of a checkpoint (those of the SDK and KEDA): ``sequencenumber`` and ``offset`` name
the *last processed* event; a consumer resumes after it. "Nothing processed yet" is
``sequencenumber=-1, offset=-1``: the SDK starts after offset ``-1``, the start of the
partition, and KEDA computes the lag ``last_enqueued - (-1)``, i.e. every event since 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from eventhub_balancer import errors

CHECKPOINT: Final = "checkpoint"
#: The SDK's ownership blobs live beside the checkpoints; we never write them, only skip them.
OWNERSHIP: Final = "ownership"

OFFSET_KEY: Final = "offset"
SEQUENCE_NUMBER_KEY: Final = "sequencenumber"
OWNER_ID_KEY: Final = "ownerid"
EPOCH_KEY: Final = "epoch"
#: ``<first sequence number>:<attempts>``: a batch whose handler killed a process (`Deaths`).
DEATHS_KEY: Final = "ehbdeaths"

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


def partition_order(partition: str) -> tuple[int, int | str]:
    """Sorts partition ids as numbers where they are (2 before 10), the others after them."""
    return (0, int(partition)) if partition.isdigit() else (1, partition)


@dataclasses.dataclass(frozen=True)
class Position:
    """Where processing of a partition stands: the last processed event."""

    offset: str
    sequence_number: int


NOTHING_PROCESSED_POSITION: Final = Position(
    offset=OFFSET_BEFORE_FIRST, sequence_number=NOTHING_PROCESSED
)


@dataclasses.dataclass(frozen=True)
class Deaths:
    """The batch from sequence number ``first`` killed a process in the handler, and has been
    attempted ``attempts`` times (each a failed attempt unless a checkpoint passes the batch):
    the count travels with the partition, so that its next owner goes on from there."""

    first: int
    attempts: int

    def encode(self) -> str:
        return f"{self.first}:{self.attempts}"

    @classmethod
    def decode(cls, raw: str) -> Deaths:
        """ValueError when ``raw`` is not ``<first>:<attempts>`` (``first`` >= 0,
        ``attempts`` >= 1)."""
        first, separator, attempts = raw.strip().partition(":")
        if not separator or not first.isdigit() or not attempts.isdigit() or int(attempts) < 1:
            raise ValueError(f"{raw!r} is not <first sequence number>:<attempts>")
        return cls(first=int(first), attempts=int(attempts))

    def passed_by(self, sequence_number: int) -> bool:
        """A checkpoint at ``sequence_number`` has passed the batch (it is done)."""
        return sequence_number >= self.first


@dataclasses.dataclass(frozen=True)
class StoredMetadata:
    """The decoded metadata of a checkpoint blob."""

    position: Position
    owner_id: str
    epoch: int
    deaths: Deaths | None = None
    #: Why a present ``ehbdeaths`` was ignored ("" when it was read, or absent).
    deaths_ignored: str = ""


def encode_metadata(
    *, position: Position, owner_id: str, epoch: int, deaths: Deaths | None = None
) -> dict[str, str]:
    """Blob metadata: the SDK's two keys (strings, sequence number as an int) plus ours."""
    metadata = {
        OFFSET_KEY: str(position.offset),
        SEQUENCE_NUMBER_KEY: str(int(position.sequence_number)),
    }
    if owner_id or epoch:
        metadata[OWNER_ID_KEY] = owner_id
        metadata[EPOCH_KEY] = str(int(epoch))
    if deaths is not None and not deaths.passed_by(position.sequence_number):
        metadata[DEATHS_KEY] = deaths.encode()
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
    deaths: Deaths | None = None
    ignored = ""
    raw_deaths = lowered.get(DEATHS_KEY)
    if raw_deaths is not None:
        # Never a reason to refuse the checkpoint: a count that cannot be read counts nothing.
        try:
            deaths = Deaths.decode(raw_deaths)
        except ValueError as e:
            ignored = str(e)
    # `or`: the storage SDK's listing gives an empty value as None.
    return StoredMetadata(
        position=Position(
            offset=lowered.get(OFFSET_KEY) or OFFSET_UNKNOWN, sequence_number=sequence_number
        ),
        owner_id=lowered.get(OWNER_ID_KEY) or "",
        epoch=epoch,
        deaths=None if deaths is not None and deaths.passed_by(sequence_number) else deaths,
        deaths_ignored=ignored,
    )
