"""Encode Python values as AMQP 1.0 bytes.

The emulator encodes what the azure-eventhub SDK's decoder reads: compound values always as
list8/list32 and map8/map32 (the SDK reads performative fields by position and mishandles
the empty-list code 0x45), descriptors as the small ``0x53`` ulong.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer_devstack.eventhubs.amqp import types

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_F64 = struct.Struct(">d")
_COMPOUND8 = struct.Struct(">BBB")
_COMPOUND32 = struct.Struct(">BII")

_SYM32 = 0xB3

#: The biggest compound body that still fits the one-byte size of list8/map8.
_SMALL_LIMIT = 255


def encode(value: Any) -> bytes:
    """Encode one value; the type decides the constructor (see ``amqp.types``)."""
    out = bytearray()
    write(out, value)
    return bytes(out)


def write(out: bytearray, value: Any) -> None:
    """Append the encoding of ``value`` to ``out``."""
    if value is None:
        out.append(0x40)
    elif value is True:
        out.append(0x41)
    elif value is False:
        out.append(0x42)
    elif isinstance(value, types.Symbol):
        data = value.encode("ascii")
        _write_variable(out, data, 0xA3, 0xB3)
    elif isinstance(value, str):
        _write_variable(out, value.encode("utf-8"), 0xA1, 0xB1)
    elif isinstance(value, bytes | bytearray | memoryview):
        _write_variable(out, bytes(value), 0xA0, 0xB0)
    elif isinstance(value, int):
        _write_int(out, value)
    elif isinstance(value, float):
        out.append(0x82)
        out += _F64.pack(value)
    elif isinstance(value, types.Described):
        out.append(0x00)
        descriptor = value.descriptor
        if isinstance(descriptor, int):
            _write_int(out, types.ULong(descriptor))
        else:
            write(out, descriptor)
        write(out, value.value)
    elif isinstance(value, types.Encoded):
        out += value.data
    elif isinstance(value, Mapping):
        body = bytearray()
        for key, item in value.items():
            write(body, key)
            write(body, item)
        _write_compound(out, body, 2 * len(value), 0xC1, 0xD1)
    elif isinstance(value, types.Array):
        _write_array(out, value)
    elif isinstance(value, uuid.UUID):
        out.append(0x98)
        out += value.bytes
    elif isinstance(value, Sequence):
        body = bytearray()
        for item in value:
            write(body, item)
        _write_compound(out, body, len(value), 0xC0, 0xD0)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as AMQP")


def _write_int(out: bytearray, value: int) -> None:
    if isinstance(value, types.ULong):
        if value == 0:
            out.append(0x44)
        elif value < 256:
            out += bytes((0x53, value))
        else:
            out.append(0x80)
            out += _U64.pack(value)
    elif isinstance(value, types.UInt):
        if value == 0:
            out.append(0x43)
        elif value < 256:
            out += bytes((0x52, value))
        else:
            out.append(0x70)
            out += _U32.pack(value)
    elif isinstance(value, types.UByte):
        out += bytes((0x50, value))
    elif isinstance(value, types.UShort):
        out.append(0x60)
        out += _U16.pack(value)
    elif isinstance(value, types.Timestamp):
        out.append(0x83)
        out += _I64.pack(value)
    elif isinstance(value, types.Int):
        if -128 <= value <= 127:
            out += bytes((0x54, value & 0xFF))
        else:
            out.append(0x71)
            out += _I32.pack(value)
    elif -128 <= value <= 127:
        out += bytes((0x55, value & 0xFF))
    else:
        out.append(0x81)
        out += _I64.pack(value)


def _write_variable(out: bytearray, data: bytes, small: int, large: int) -> None:
    if len(data) <= _SMALL_LIMIT:
        out += bytes((small, len(data)))
    else:
        out.append(large)
        out += _U32.pack(len(data))
    out += data


def _write_compound(out: bytearray, body: bytearray, count: int, small: int, large: int) -> None:
    # The size counts the count field itself: 1 byte in the small form, 4 in the large.
    if len(body) + 1 <= _SMALL_LIMIT and count <= _SMALL_LIMIT:
        out += _COMPOUND8.pack(small, len(body) + 1, count)
    else:
        out += _COMPOUND32.pack(large, len(body) + 4, count)
    out += body


def _write_array(out: bytearray, value: types.Array) -> None:
    if value.code != _SYM32:
        raise TypeError(f"only symbol arrays are supported, not code {value.code:#x}")
    body = bytearray()
    for item in value.items:
        data = str(item).encode("ascii")
        body += _U32.pack(len(data))
        body += data
    out.append(0xF0)
    # size counts the count (4 bytes) and the element constructor (1 byte)
    out += _U32.pack(len(body) + 5)
    out += _U32.pack(len(value.items))
    out.append(_SYM32)
    out += body


def symbol_array(symbols: Sequence[str]) -> types.Array:
    """A symbol array (capabilities, SASL mechanisms)."""
    return types.Array(code=_SYM32, items=tuple(symbols))
