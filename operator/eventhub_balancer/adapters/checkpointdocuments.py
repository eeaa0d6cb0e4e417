"""The export document of ``ehb checkpoints export``, and reading it back for an import.

A backup of a consumer group's checkpoints is plain JSON: its coordinates, when it was taken,
and each partition's position with the owner and epoch it had. An import takes only the
positions (`parse_import`); it writes its own epoch (`checkpointresets`).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Final, TypedDict

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointrequests
from eventhub_balancer.contracts import bounds, checkpointblobs

#: The ``kind`` and ``version`` of an export document, checked on import.
EXPORT_KIND: Final = "EventHubCheckpoints"
EXPORT_VERSION: Final = 1


class ExportedCheckpoint(TypedDict):
    partition: str
    sequenceNumber: int
    offset: str
    owner: str
    epoch: int


class ExportDocument(TypedDict):
    kind: str
    version: int
    fullyQualifiedNamespace: str
    eventHub: str
    consumerGroup: str
    exportedAt: str
    checkpoints: list[ExportedCheckpoint]


def export_document(
    checkpoints: Sequence[checkpointrequests.Checkpoint],
    *,
    fully_qualified_namespace: str,
    eventhub_name: str,
    consumer_group: str,
    now: datetime.datetime,
) -> ExportDocument:
    """A backup of a consumer group's checkpoints, in the shape `parse_import` reads back."""
    return ExportDocument(
        kind=EXPORT_KIND,
        version=EXPORT_VERSION,
        fullyQualifiedNamespace=fully_qualified_namespace,
        eventHub=eventhub_name,
        consumerGroup=consumer_group,
        exportedAt=now.astimezone(datetime.UTC).isoformat(),
        checkpoints=[
            ExportedCheckpoint(
                partition=c.partition,
                sequenceNumber=c.sequence_number,
                offset=c.offset,
                owner=c.owner_id,
                epoch=c.epoch,
            )
            for c in checkpoints
        ],
    )


def parse_import(document: object, *, source: str) -> dict[str, checkpointblobs.Position]:
    """The positions of an export document, by partition; every problem names its place.

    Owners and epochs in the file are history: an import writes its own epoch, above the
    target's, so only the positions are taken.
    """
    if not isinstance(document, Mapping):
        raise errors.InvalidInput(
            source, "must be a JSON object, as `ehb checkpoints export` writes"
        )
    if document.get("kind") != EXPORT_KIND:
        raise errors.InvalidInput(
            f"{source}: kind", f"must be {EXPORT_KIND!r} (got {document.get('kind')!r})"
        )
    if document.get("version") != EXPORT_VERSION:
        raise errors.InvalidInput(
            f"{source}: version",
            f"must be {EXPORT_VERSION} (got {document.get('version')!r}): export again with "
            "this version of ehb",
        )
    items = document.get("checkpoints")
    if not isinstance(items, list):
        raise errors.InvalidInput(f"{source}: checkpoints", "must be a list")
    result: dict[str, checkpointblobs.Position] = {}
    for index, item in enumerate(items):
        where = f"{source}: checkpoints[{index}]"
        if not isinstance(item, Mapping):
            raise errors.InvalidInput(where, "must be an object with partition and sequenceNumber")
        partition = item.get("partition")
        if not bounds.is_partition_id(partition):
            raise errors.InvalidInput(f"{where}.partition", f"{partition!r} is not a partition id")
        partition = str(partition)
        if partition in result:
            raise errors.InvalidInput(f"{where}.partition", f"{partition!r} appears twice")
        sequence = item.get("sequenceNumber")
        # int64, as the SDK and KEDA read a checkpoint's values: a larger one would be
        # written and then fail every reader.
        if (
            isinstance(sequence, bool)
            or not isinstance(sequence, int)
            or not -1 <= sequence <= bounds.INT64_MAX
        ):
            raise errors.InvalidInput(
                f"{where}.sequenceNumber",
                f"{sequence!r} is not an integer from -1 to {bounds.INT64_MAX} (an int64, as Event "
                "Hubs numbers events)",
            )
        offset = item.get("offset", checkpointblobs.OFFSET_UNKNOWN)
        if offset is None:  # what exports wrote for an unknown offset before 1 December 2026
            offset = checkpointblobs.OFFSET_UNKNOWN
        if not isinstance(offset, str) or not is_offset(offset):
            raise errors.InvalidInput(
                f"{where}.offset",
                f"{offset!r} is not an offset: give the decimal string the export wrote "
                f'(e.g. "4096"), "-1" or "", or leave the field out',
            )
        result[partition] = checkpointblobs.Position(offset=offset, sequence_number=sequence)
    if not result:
        raise errors.InvalidInput(f"{source}: checkpoints", "is empty: nothing to import")
    return result


def is_offset(text: str) -> bool:
    """What a checkpoint's offset may be: the decimal int64 the SDK writes, ``-1`` (before the
    first event) or empty (not known: the consumer resumes from the sequence number).

    Checked before anything is written: anything else (a newline, a letter) would be refused
    by the HTTP layer or the SDK only while writing, with part of an import already applied.
    """
    if text in (checkpointblobs.OFFSET_UNKNOWN, checkpointblobs.OFFSET_BEFORE_FIRST):
        return True
    # len first: int() of thousands of digits is slow, and refused past 4300.
    return (
        text.isascii()
        and text.isdigit()
        and len(text) <= len(str(bounds.INT64_MAX))
        and int(text) <= bounds.INT64_MAX
    )
