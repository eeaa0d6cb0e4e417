"""Building the frames the server sends, at the full length the SDK expects.

The azure-eventhub SDK indexes performative fields by position, so every list here has all
its fields (open 10, begin 8, attach 14, flow 11, transfer 11, disposition 6, detach 3,
end 1, close 1, sasl-mechanisms 1, sasl-outcome 2), with None where a field is absent.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer_devstack.eventhubs.amqp import encoding, frames, types

OPEN = 0x10
BEGIN = 0x11
ATTACH = 0x12
FLOW = 0x13
TRANSFER = 0x14
DISPOSITION = 0x15
DETACH = 0x16
END = 0x17
CLOSE = 0x18
SASL_MECHANISMS = 0x40
SASL_INIT = 0x41
SASL_OUTCOME = 0x44

ERROR = 0x1D
SOURCE = 0x28
TARGET = 0x29
ACCEPTED = 0x24
REJECTED = 0x25

#: Message format of a batch: the body's data sections are whole encoded messages.
BATCH_FORMAT = 0x80013700

#: Roles in attach and disposition: False is the sender, True the receiver.
ROLE_SENDER = False
ROLE_RECEIVER = True


def _frame(channel: int, code: int, fields: Sequence[Any], frame_type: int = 0) -> bytes:
    body = encoding.encode(types.Described(types.ULong(code), list(fields)))
    return frames.build(channel=channel, body=body, frame_type=frame_type)


def error(condition: str, description: str) -> types.Described:
    """An AMQP error (condition, description, info)."""
    return types.Described(types.ULong(ERROR), [types.Symbol(condition), description, None])


def sasl_mechanisms(mechanisms: Sequence[str]) -> bytes:
    return _frame(0, SASL_MECHANISMS, [encoding.symbol_array(mechanisms)], frames.TYPE_SASL)


def sasl_outcome(code: int) -> bytes:
    return _frame(0, SASL_OUTCOME, [types.UByte(code), None], frames.TYPE_SASL)


def open_(*, container_id: str, max_frame_size: int, channel_max: int) -> bytes:
    return _frame(
        0,
        OPEN,
        [
            container_id,
            None,
            types.UInt(max_frame_size),
            types.UShort(channel_max),
            None,  # idle-timeout: none, the emulator closes no idle connection
            None,
            None,
            None,
            None,
            None,
        ],
    )


def begin(
    *, channel: int, remote_channel: int, next_outgoing_id: int, incoming_window: int
) -> bytes:
    return _frame(
        channel,
        BEGIN,
        [
            types.UShort(remote_channel),
            types.UInt(next_outgoing_id),
            types.UInt(incoming_window),
            types.UInt(incoming_window),
            types.UInt(0xFFFFFFFF),
            None,
            None,
            None,
        ],
    )


def attach(
    *,
    channel: int,
    name: str,
    handle: int,
    role: bool,
    snd_settle_mode: int,
    rcv_settle_mode: int,
    source: Any,
    target: Any,
    initial_delivery_count: int | None,
    max_message_size: int | None,
    offered_capabilities: Sequence[str] | None = None,
    properties: Mapping[Any, Any] | None = None,
) -> bytes:
    return _frame(
        channel,
        ATTACH,
        [
            name,
            types.UInt(handle),
            role,
            types.UByte(snd_settle_mode),
            types.UByte(rcv_settle_mode),
            source,
            target,
            None,
            False,
            None if initial_delivery_count is None else types.UInt(initial_delivery_count),
            None if max_message_size is None else types.ULong(max_message_size),
            None if not offered_capabilities else encoding.symbol_array(offered_capabilities),
            None,
            properties,
        ],
    )


def flow(
    *,
    channel: int,
    next_incoming_id: int,
    incoming_window: int,
    next_outgoing_id: int,
    outgoing_window: int,
    handle: int | None,
    delivery_count: int | None,
    link_credit: int | None,
    available: int | None = None,
    drain: bool = False,
) -> bytes:
    return _frame(
        channel,
        FLOW,
        [
            types.UInt(next_incoming_id),
            types.UInt(incoming_window),
            types.UInt(next_outgoing_id),
            types.UInt(outgoing_window),
            None if handle is None else types.UInt(handle),
            None if delivery_count is None else types.UInt(delivery_count),
            None if link_credit is None else types.UInt(link_credit),
            None if available is None else types.UInt(available),
            drain,
            False,
            None,
        ],
    )


def disposition(
    *, channel: int, first: int, last: int, state: types.Described | None, settled: bool = True
) -> bytes:
    return _frame(
        channel,
        DISPOSITION,
        [ROLE_RECEIVER, types.UInt(first), types.UInt(last), settled, state, False],
    )


ACCEPTED_STATE = types.Described(types.ULong(ACCEPTED), [])


def rejected(condition: str, description: str) -> types.Described:
    return types.Described(types.ULong(REJECTED), [error(condition, description)])


def detach(*, channel: int, handle: int, closed: bool, err: types.Described | None) -> bytes:
    return _frame(channel, DETACH, [types.UInt(handle), closed, err])


def end(*, channel: int, err: types.Described | None = None) -> bytes:
    return _frame(channel, END, [err])


def close(*, err: types.Described | None = None) -> bytes:
    return _frame(0, CLOSE, [err])


# A transfer's performative, laid out with fixed widths so that it is one struct.pack:
# described(0x00 0x53 0x14) list32(size, count 11) handle uint, delivery-id uint,
# delivery-tag vbin8(4), message-format uint, settled bool, more bool, then five nulls /
# falses: rcv-settle-mode null, state null, resume false, aborted false, batchable false.
_TRANSFER = struct.Struct(">IBBH" + "BBB" + "BII" + "BI" + "BI" + "BBI" + "BI" + "BB" + "5B")
_TRANSFER_LIST_SIZE = _TRANSFER.size - 8 - 3 - 5


def transfer(
    *,
    channel: int,
    handle: int,
    delivery_id: int,
    message_format: int,
    settled: bool,
    more: bool,
    payload: bytes,
) -> bytes:
    """One transfer frame. Every frame of a delivery repeats its id and tag (allowed, and
    simpler for the SDK, which reads them from whichever frame it keeps)."""
    head = _TRANSFER.pack(
        _TRANSFER.size + len(payload),
        2,
        0,
        channel,
        0x00,
        0x53,
        TRANSFER,
        0xD0,
        _TRANSFER_LIST_SIZE,
        11,
        0x70,
        handle,
        0x70,
        delivery_id,
        0xA0,
        4,
        delivery_id,
        0x70,
        message_format,
        0x41 if settled else 0x42,
        0x41 if more else 0x42,
        0x40,
        0x40,
        0x42,
        0x42,
        0x42,
    )
    return head + payload


TRANSFER_OVERHEAD = _TRANSFER.size
