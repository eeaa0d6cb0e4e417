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
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < -1:
            raise errors.InvalidInput(
                f"{where}.sequenceNumber", f"{sequence!r} is not an integer >= -1"
            )
        offset = item.get("offset", checkpointblobs.OFFSET_UNKNOWN)
        if not isinstance(offset, str):
            raise errors.InvalidInput(f"{where}.offset", f"{offset!r} is not a string")
        result[partition] = checkpointblobs.Position(offset=offset, sequence_number=sequence)
    if not result:
        raise errors.InvalidInput(f"{source}: checkpoints", "is empty: nothing to import")
    return result
