"""Start positions (the CR's ``spec.startPosition``) and the checkpoint each one seeds.

One model for both sides: the operator parses the CR's value (`parse_start_position`) and
writes it into each pod's ConfigMap as compact JSON of the CR's own shape (`to_json`); the pod
parses that JSON with the same function. Every problem is an `errors.InvalidInput` naming the
field to change.

A partition without a checkpoint gets one at its start position before anyone consumes it:
KEDA over-scales on partitions without a checkpoint (keda #5249) and reads a seed's lag as
the events still to process (`seed_position`). Pure: the bounds of a partition come from Event
Hubs through ``adapters.receiving``, and ``adapters.checkpointing`` writes the seed.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Final, Literal, TypedDict

from eventhub_balancer import errors
from eventhub_balancer.contracts import bounds, checkpointblobs


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
    """Start at the first event enqueued at or after this time (time-zone aware)."""

    enqueued_time: datetime.datetime


StartPosition = Earliest | Latest | FromSequenceNumber | FromEnqueuedTime

EARLIEST: Final = Earliest()
LATEST: Final = Latest()


class SequenceNumberBody(TypedDict):
    sequenceNumber: int


class EnqueuedTimeBody(TypedDict):
    enqueuedTime: str


#: The CR's shape: a string or an object with exactly one key.
StartPositionBody = Literal["earliest", "latest"] | SequenceNumberBody | EnqueuedTimeBody

_SHAPES = "earliest, latest, {sequenceNumber: N} or {enqueuedTime: <RFC 3339 time>}"


def parse_start_position(value: object, *, field: str = "startPosition") -> StartPosition:
    """``earliest | latest | {sequenceNumber: N} | {enqueuedTime: RFC 3339}``, as in the CR.

    None (no value) is ``earliest``, the CRD's default. ``field`` is where the value came from
    (``spec.startPosition`` in the CR, ``startPosition`` in a ConfigMap): errors name it.
    """
    if value is None or value == "earliest":
        return EARLIEST
    if value == "latest":
        return LATEST
    if isinstance(value, str):
        raise errors.InvalidInput(field, f"{value!r} is not a start position: use {_SHAPES}")
    if not isinstance(value, Mapping) or len(value) != 1:
        raise errors.InvalidInput(
            field,
            "must be earliest, latest, or an object with exactly one of "
            "sequenceNumber or enqueuedTime",
        )
    ((key, raw),) = value.items()
    if key == "sequenceNumber":
        # An int64, as Event Hubs' sequence numbers (and the CRD's field) are.
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= bounds.MAX_EPOCH:
            raise errors.InvalidInput(
                f"{field}.sequenceNumber", f"{raw!r} is not an integer from 0 to 2^63-1"
            )
        return FromSequenceNumber(sequence_number=raw)
    if key == "enqueuedTime":
        return FromEnqueuedTime(enqueued_time=parse_rfc3339(raw, field=f"{field}.enqueuedTime"))
    raise errors.InvalidInput(field, f"unknown key {key!r}: use sequenceNumber or enqueuedTime")


def parse_rfc3339(raw: object, *, field: str) -> datetime.datetime:
    """An RFC 3339 time with a zone (a string, or a YAML loader's timestamp), in UTC; what
    ``field`` holds is refused, saying what to write, when it is none."""
    if isinstance(raw, datetime.datetime):  # a YAML loader's timestamp
        when = raw
    elif isinstance(raw, str):
        try:
            # RFC 3339 allows a lower-case "t" and "z", and the API server admits them;
            # fromisoformat does not read them.
            when = datetime.datetime.fromisoformat(raw.upper())
        except ValueError:
            raise errors.InvalidInput(
                field, f"{raw!r} is not an RFC 3339 time, e.g. 2024-05-01T00:00:00Z"
            ) from None
    else:
        raise errors.InvalidInput(
            field, f"{raw!r} is not an RFC 3339 time, e.g. 2024-05-01T00:00:00Z"
        )
    # RFC 3339 demands an offset; guessing one would start hours early or late.
    if when.tzinfo is None:
        raise errors.InvalidInput(field, f"{raw!r} has no time zone: end it with Z or +HH:MM")
    # In UTC now: the ConfigMap carries it so, and a time whose offset moves it past year 1
    # or 9999 (0001-01-01T00:00:00+01:00) has no UTC form to carry.
    try:
        return when.astimezone(datetime.UTC)
    except OverflowError:
        raise errors.InvalidInput(
            field, f"{raw!r} is outside the years 1 to 9999 in UTC: give a time within them"
        ) from None


def to_body(position: StartPosition) -> StartPositionBody:
    """The CR's shape; an enqueued time in UTC with a Z, to the second, as Kubernetes writes."""
    match position:
        case Earliest():
            return "earliest"
        case Latest():
            return "latest"
        case FromSequenceNumber(sequence_number=number):
            return {"sequenceNumber": number}
        case FromEnqueuedTime(enqueued_time=when):
            utc = when.astimezone(datetime.UTC).replace(microsecond=0, tzinfo=None)
            # isoformat, not strftime: "%Y" writes year 1 as "1", which no parser reads back.
            return {"enqueuedTime": utc.isoformat() + "Z"}


def to_json(position: StartPosition) -> str:
    """The start position as the ConfigMap carries it: compact JSON of the CR's shape."""
    return json.dumps(to_body(position), separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class PartitionBounds:
    """What Event Hubs says about a partition (``get_partition_properties``)."""

    beginning_sequence_number: int
    last_sequence_number: int
    last_offset: str
    empty: bool

    def waiting_after(self, sequence_number: int) -> int:
        """The events the partition still holds after ``sequence_number`` (a checkpoint's):
        those retention removed wait for no one, so "nothing processed" (-1) on a partition
        that holds its last ten events is ten, and on one it holds none of, nothing."""
        first = self.last_sequence_number + 1 if self.empty else self.beginning_sequence_number
        return max(0, self.last_sequence_number - max(sequence_number, first - 1))


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
