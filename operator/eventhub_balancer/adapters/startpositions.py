"""Start positions (the CR's ``spec.startPosition``) and the checkpoint each one seeds.

A partition without a checkpoint gets one at its start position before anyone consumes it:
KEDA over-scales on partitions without a checkpoint (keda #5249) and reads a seed's lag as
the events still to process. Pure: the bounds of a partition come from Event Hubs through
``adapters.receiving``, and ``adapters.checkpointing`` writes the seed.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Final

from eventhub_balancer import errors
from eventhub_balancer.contracts import checkpointblobs


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


def seed_position(
    start: StartPosition, *, bounds: PartitionBounds | None = None
) -> checkpointblobs.Position:
    """The checkpoint to create for a partition that has none, so that KEDA reads its lag right.

    ``earliest`` seeds "nothing processed" (just before the first retained event when the
    bounds are known); ``latest`` needs the bounds (the last event counts as processed);
    ``{sequenceNumber: N}`` seeds N - 1; an enqueued time must be resolved by the caller
    (the first event at that time gives a sequence number) because only a receive can.
    """
    match start:
        case Earliest():
            if bounds is None:
                return checkpointblobs.NOTHING_PROCESSED_POSITION
            if bounds.empty:
                return checkpointblobs.Position(
                    offset=checkpointblobs.OFFSET_BEFORE_FIRST,
                    sequence_number=bounds.last_sequence_number,
                )
            return checkpointblobs.Position(
                offset=checkpointblobs.OFFSET_BEFORE_FIRST,
                sequence_number=bounds.beginning_sequence_number - 1,
            )
        case Latest():
            if bounds is None:
                raise errors.ConfigurationError(
                    "startPosition latest: the partition's last sequence number is needed to seed "
                    "its checkpoint (pass the partition bounds from Event Hubs)"
                )
            if bounds.empty:
                return checkpointblobs.Position(
                    offset=checkpointblobs.OFFSET_BEFORE_FIRST,
                    sequence_number=bounds.last_sequence_number,
                )
            return checkpointblobs.Position(
                offset=bounds.last_offset, sequence_number=bounds.last_sequence_number
            )
        case FromSequenceNumber(sequence_number=number):
            if number == 0:
                return checkpointblobs.NOTHING_PROCESSED_POSITION
            return checkpointblobs.Position(
                offset=checkpointblobs.OFFSET_UNKNOWN, sequence_number=number - 1
            )
        case FromEnqueuedTime(enqueued_time=when):
            raise errors.ConfigurationError(
                f"startPosition enqueuedTime {when.isoformat()}: resolve it to the sequence number "
                "of the first event at that time and seed from that sequence number"
            )
