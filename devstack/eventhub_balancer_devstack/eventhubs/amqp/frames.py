"""AMQP 1.0 framing: protocol headers, frame headers, and splitting a stream into frames.

A frame is ``size(4) doff(1) type(1) channel(2)`` then the body; the body of a non-empty
frame is a described performative list, and for a transfer the payload follows it.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from eventhub_balancer_devstack.eventhubs.amqp import decoding, types

#: Protocol headers: "AMQP", protocol id (0 AMQP, 3 SASL), version 1.0.0.
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
HEADER_SIZE = 8

FRAME_HEADER = struct.Struct(">IBBH")
TYPE_AMQP = 0
TYPE_SASL = 1
#: The smallest max-frame-size AMQP allows; frames up to it are always acceptable.
MIN_MAX_FRAME_SIZE = 512
#: An empty frame (a header alone): the heartbeat that keeps a peer's idle-time-out at bay.
EMPTY_FRAME = FRAME_HEADER.pack(8, 2, TYPE_AMQP, 0)


class FramingError(ValueError):
    """The stream does not hold a valid frame header (size, data offset)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    """One received frame: ``code`` is None for an empty (heartbeat) frame."""

    type: int
    channel: int
    code: int | None
    fields: list[Any]
    payload: bytes


def build(*, channel: int, body: bytes, frame_type: int = TYPE_AMQP) -> bytes:
    """Wrap an encoded body in a frame header (data offset 2: no extended header)."""
    return FRAME_HEADER.pack(len(body) + 8, 2, frame_type, channel) + body


def next_frame_size(buffer: bytearray, pos: int, *, max_frame_size: int) -> int | None:
    """The size of the frame at ``pos`` in ``buffer``, or None if its header is not in yet."""
    if len(buffer) - pos < 8:
        return None
    size = int.from_bytes(buffer[pos : pos + 4], "big")
    doff = buffer[pos + 4]
    if size < 8 or doff < 2 or doff * 4 > size:
        raise FramingError(f"invalid frame header (size {size}, data offset {doff})")
    if size > max_frame_size:
        raise FramingError(f"frame of {size} bytes exceeds max-frame-size {max_frame_size}")
    return size


def peek_code(data: bytes) -> int | None:
    """The performative code of a frame, without decoding it (None: empty or long form)."""
    size = int.from_bytes(data[:4], "big")
    start = data[4] * 4
    if size - start >= 3 and data[start] == 0x00 and data[start + 1] == 0x53:
        return int(data[start + 2])
    return None


def parse(data: bytes) -> Frame:
    """Decode one complete frame (as sliced off by ``next_frame_size``)."""
    size, doff, frame_type, channel = FRAME_HEADER.unpack_from(data, 0)
    start = doff * 4
    if start == size:
        return Frame(type=frame_type, channel=channel, code=None, fields=[], payload=b"")
    performative, end = decoding.decode(data, start)
    if not isinstance(performative, types.Described) or not isinstance(
        performative.descriptor, types.ULong
    ):
        raise decoding.DecodeError("frame body is not a described performative")
    fields = performative.value
    if not isinstance(fields, list):
        raise decoding.DecodeError("performative is not a list")
    return Frame(
        type=frame_type,
        channel=channel,
        code=int(performative.descriptor),
        fields=fields,
        payload=data[end:size],
    )


def field(fields: list[Any], index: int, default: Any = None) -> Any:
    """A performative field by position; omitted trailing fields take their default."""
    if index < len(fields) and fields[index] is not None:
        return fields[index]
    return default
