"""Events as stored bytes: parse what producers send, add the broker's annotations.

The emulator keeps each event as its encoded AMQP message, annotated once at enqueue time
with ``x-opt-sequence-number``, ``x-opt-offset``, ``x-opt-enqueued-time`` (and
``x-opt-partition-key``), so that delivering it is byte concatenation. Only the message
annotations section is ever decoded, and only when a producer sent one.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from eventhub_balancer_devstack.eventhubs.amqp import decoding, encoding, types

_HEADER = 0x70
_DELIVERY_ANNOTATIONS = 0x71
_MESSAGE_ANNOTATIONS = 0x72
_DATA = 0x75
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_MAP32 = struct.Struct(">BII")

PARTITION_KEY = "x-opt-partition-key"
_SEQUENCE_KEY = encoding.encode(types.Symbol("x-opt-sequence-number")) + b"\x81"
_OFFSET_KEY = encoding.encode(types.Symbol("x-opt-offset"))
_TIME_KEY = encoding.encode(types.Symbol("x-opt-enqueued-time")) + b"\x83"
_PARTITION_KEY_KEY = encoding.encode(types.Symbol(PARTITION_KEY))
_SECTION_MESSAGE_ANNOTATIONS = b"\x00\x53\x72"
_SECTION_DELIVERY_ANNOTATIONS = b"\x00\x53\x71"

_LAST_SEQUENCE_KEY = encoding.encode(types.Symbol("last_enqueued_sequence_number")) + b"\x81"
_LAST_OFFSET_KEY = encoding.encode(types.Symbol("last_enqueued_offset"))
_LAST_TIME_KEY = encoding.encode(types.Symbol("last_enqueued_time_utc")) + b"\x83"
_RETRIEVAL_TIME_KEY = encoding.encode(types.Symbol("runtime_info_retrieval_time_utc")) + b"\x83"


class IncomingEvent(NamedTuple):
    """A producer's message taken apart around its message annotations.

    A NamedTuple rather than a frozen dataclass: one is built per event on the hot path.
    """

    head: bytes
    """The header section, which must stay in front of the annotations."""
    annotations: bytes
    """The producer's own message-annotation entries, still encoded."""
    annotation_count: int
    """How many elements (keys plus values) ``annotations`` holds."""
    partition_key: str | None
    rest: bytes
    """Properties, application properties, body and footer, still encoded."""


class StoredEvent(NamedTuple):
    """An event in a partition; ``payload`` is the encoded message with the annotations."""

    sequence_number: int
    offset: int
    enqueued_ms: int
    payload: bytes
    head_size: int
    """Where delivery annotations go: after the header section."""


def _section(data: bytes, pos: int) -> tuple[int, int, int]:
    """Return (code, value start, value end) of the section at ``pos``."""
    if len(data) < pos + 3 or data[pos] != 0x00:
        raise decoding.DecodeError("message section is not a described value")
    if data[pos + 1] == 0x53:
        code, start = data[pos + 2], pos + 3
    elif data[pos + 1] == 0x80 and len(data) >= pos + 10:
        code, start = int.from_bytes(data[pos + 2 : pos + 10], "big"), pos + 10
    else:
        raise decoding.DecodeError("message section descriptor is not a ulong")
    return code, start, decoding.skip(data, start)


def parse(data: bytes) -> IncomingEvent:
    """Take one encoded message apart (see ``IncomingEvent``)."""
    head = b""
    annotations = b""
    count = 0
    partition_key = None
    pos = 0
    while pos < len(data):
        code, start, end = _section(data, pos)
        if code == _HEADER:
            head = data[pos:end]
        elif code == _DELIVERY_ANNOTATIONS:
            pass  # meant for the broker, never stored
        elif code == _MESSAGE_ANNOTATIONS:
            values, _ = decoding.decode(data, start)
            if not isinstance(values, dict):
                raise decoding.DecodeError("message annotations are not a map")
            key = values.get(PARTITION_KEY)
            partition_key = None if key is None else str(key)
            if data[start] == 0xC1:
                count, annotations = data[start + 2], data[start + 3 : end]
            else:
                count, annotations = _U32.unpack_from(data, start + 4)[0], data[start + 9 : end]
        else:
            return IncomingEvent(head, annotations, count, partition_key, data[pos:])
        pos = end
    return IncomingEvent(head, annotations, count, partition_key, b"")


def split_batch(data: bytes) -> tuple[str | None, list[IncomingEvent]]:
    """Parse a batch message (format 0x80013700): each data section is a whole message.

    Returns the batch's own partition key and its events.
    """
    outer = parse(data)
    events = []
    pos = 0
    rest = outer.rest
    while pos < len(rest):
        code, start, end = _section(rest, pos)
        if code == _DATA:
            inner, _ = decoding.decode(rest, start)
            if not isinstance(inner, bytes):
                raise decoding.DecodeError("batch data section is not binary")
            events.append(parse(inner))
        pos = end
    return outer.partition_key, events


def store(
    event: IncomingEvent,
    *,
    sequence_number: int,
    offset: int,
    enqueued_ms: int,
    partition_key: str | None,
) -> StoredEvent:
    """Annotate an incoming event with its place in the partition."""
    offset_text = str(offset).encode("ascii")
    entries = b"".join(
        (
            event.annotations,
            _SEQUENCE_KEY,
            _I64.pack(sequence_number),
            _OFFSET_KEY,
            b"\xa1",
            bytes((len(offset_text),)),
            offset_text,
            _TIME_KEY,
            _I64.pack(enqueued_ms),
        )
    )
    count = event.annotation_count + 6
    if partition_key is not None and event.partition_key is None:
        entries += _PARTITION_KEY_KEY + encoding.encode(partition_key)
        count += 2
    payload = b"".join(
        (
            event.head,
            _SECTION_MESSAGE_ANNOTATIONS,
            _MAP32.pack(0xD1, len(entries) + 4, count),
            entries,
            event.rest,
        )
    )
    return StoredEvent(sequence_number, offset, enqueued_ms, payload, len(event.head))


def runtime_metrics(
    *, last_sequence_number: int, last_offset: int, last_enqueued_ms: int, now_ms: int
) -> bytes:
    """The delivery-annotations section a receiver with runtime metrics gets per event."""
    offset_text = str(last_offset).encode("ascii")
    entries = b"".join(
        (
            _LAST_SEQUENCE_KEY,
            _I64.pack(last_sequence_number),
            _LAST_OFFSET_KEY,
            b"\xa1",
            bytes((len(offset_text),)),
            offset_text,
            _LAST_TIME_KEY,
            _I64.pack(last_enqueued_ms),
            _RETRIEVAL_TIME_KEY,
            _I64.pack(now_ms),
        )
    )
    return _SECTION_DELIVERY_ANNOTATIONS + _MAP32.pack(0xD1, len(entries) + 4, 8) + entries
