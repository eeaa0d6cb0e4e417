"""Decode AMQP 1.0 bytes into Python values (see ``amqp.types`` for the wrappers).

Everything a client sends passes through here, so every read is bounds-checked and any
malformed input raises ``DecodeError``: the connection that sent it is closed with
``amqp:decode-error`` while the server keeps serving everyone else.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from eventhub_balancer_devstack.eventhubs.amqp import types

_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")

#: Nesting deeper than this is no message the SDK sends: refuse it instead of recursing.
MAX_DEPTH = 32


class DecodeError(ValueError):
    """The bytes are not valid AMQP (or use a type this server does not accept)."""


_Reader = Callable[[bytes, int, int], tuple[Any, int]]


def decode(data: bytes, pos: int = 0) -> tuple[Any, int]:
    """Decode the value at ``pos``; return it and the position after it."""
    return _read(data, pos, 0)


def _need(data: bytes, end: int) -> None:
    if end > len(data):
        raise DecodeError("truncated AMQP value")


def _read(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise DecodeError("AMQP value nested too deeply")
    _need(data, pos + 1)
    code = data[pos]
    reader = _READERS.get(code)
    if reader is None:
        raise DecodeError(f"unknown AMQP constructor {code:#04x}")
    result: tuple[Any, int] = reader(data, pos + 1, depth)
    return result


def _fixed(size: int, convert: Callable[[bytes], Any]) -> _Reader:
    def reader(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        _need(data, pos + size)
        return convert(data[pos : pos + size]), pos + size

    return reader


def _constant(value: Any) -> _Reader:
    def reader(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        return value, pos

    return reader


def _variable(width: int, convert: Callable[[bytes], Any]) -> _Reader:
    def reader(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        _need(data, pos + width)
        size = data[pos] if width == 1 else _U32.unpack_from(data, pos)[0]
        start = pos + width
        _need(data, start + size)
        return convert(data[start : start + size]), start + size

    return reader


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError("string is not UTF-8") from e


def _symbol(raw: bytes) -> types.Symbol:
    try:
        return types.Symbol(raw.decode("ascii"))
    except UnicodeDecodeError as e:
        raise DecodeError("symbol is not ASCII") from e


def _compound(width: int, is_map: bool) -> _Reader:
    def reader(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        _need(data, pos + 2 * width)
        if width == 1:
            size, count = data[pos], data[pos + 1]
        else:
            size, count = _U32.unpack_from(data, pos)[0], _U32.unpack_from(data, pos + 4)[0]
        end = pos + width + size
        _need(data, end)
        if size < width:
            raise DecodeError("compound size smaller than its count field")
        cursor = pos + 2 * width
        items = []
        for _ in range(count):
            item, cursor = _read(data, cursor, depth + 1)
            items.append(item)
        if cursor != end:
            raise DecodeError("compound size does not match its content")
        if not is_map:
            return items, end
        if count % 2:
            raise DecodeError("map with an odd number of elements")
        try:
            return dict(zip(items[::2], items[1::2], strict=True)), end
        except TypeError as e:
            raise DecodeError("map key is not hashable") from e

    return reader


def _array(width: int) -> _Reader:
    def reader(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
        _need(data, pos + 2 * width)
        if width == 1:
            size, count = data[pos], data[pos + 1]
        else:
            size, count = _U32.unpack_from(data, pos)[0], _U32.unpack_from(data, pos + 4)[0]
        end = pos + width + size
        _need(data, end)
        cursor = pos + 2 * width
        if count == 0:
            return [], end
        _need(data, cursor + 1)
        element = data[cursor]
        if element == 0x00:
            raise DecodeError("arrays of described values are not supported")
        element_reader = _READERS.get(element)
        if element_reader is None:
            raise DecodeError(f"unknown AMQP array constructor {element:#04x}")
        cursor += 1
        items = []
        for _ in range(count):
            item, cursor = element_reader(data, cursor, depth + 1)
            items.append(item)
        if cursor != end:
            raise DecodeError("array size does not match its content")
        return items, end

    return reader


def _described(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    descriptor, pos = _read(data, pos, depth + 1)
    value, pos = _read(data, pos, depth + 1)
    return types.Described(descriptor, value), pos


_READERS: dict[int, Any] = {
    0x00: _described,
    0x40: _constant(None),
    0x41: _constant(True),
    0x42: _constant(False),
    0x43: _constant(types.UInt(0)),
    0x44: _constant(types.ULong(0)),
    0x45: _constant([]),
    0x50: _fixed(1, lambda b: types.UByte(b[0])),
    0x51: _fixed(1, lambda b: int.from_bytes(b, "big", signed=True)),
    0x52: _fixed(1, lambda b: types.UInt(b[0])),
    0x53: _fixed(1, lambda b: types.ULong(b[0])),
    0x54: _fixed(1, lambda b: types.Int(int.from_bytes(b, "big", signed=True))),
    0x55: _fixed(1, lambda b: int.from_bytes(b, "big", signed=True)),
    0x56: _fixed(1, lambda b: b[0] != 0),
    0x60: _fixed(2, lambda b: types.UShort(_U16.unpack(b)[0])),
    0x61: _fixed(2, lambda b: _I16.unpack(b)[0]),
    0x70: _fixed(4, lambda b: types.UInt(_U32.unpack(b)[0])),
    0x71: _fixed(4, lambda b: types.Int(_I32.unpack(b)[0])),
    0x72: _fixed(4, lambda b: _F32.unpack(b)[0]),
    0x73: _fixed(4, lambda b: chr(_U32.unpack(b)[0])),
    0x80: _fixed(8, lambda b: types.ULong(_U64.unpack(b)[0])),
    0x81: _fixed(8, lambda b: _I64.unpack(b)[0]),
    0x82: _fixed(8, lambda b: _F64.unpack(b)[0]),
    0x83: _fixed(8, lambda b: types.Timestamp(_I64.unpack(b)[0])),
    0x98: _fixed(16, lambda b: uuid.UUID(bytes=bytes(b))),
    0xA0: _variable(1, bytes),
    0xA1: _variable(1, _text),
    0xA3: _variable(1, _symbol),
    0xB0: _variable(4, bytes),
    0xB1: _variable(4, _text),
    0xB3: _variable(4, _symbol),
    0xC0: _compound(1, is_map=False),
    0xC1: _compound(1, is_map=True),
    0xD0: _compound(4, is_map=False),
    0xD1: _compound(4, is_map=True),
    0xE0: _array(1),
    0xF0: _array(4),
}

#: Fixed widths, for skipping a value without building it (sections of stored events).
_FIXED_WIDTHS = {
    **dict.fromkeys((0x40, 0x41, 0x42, 0x43, 0x44, 0x45), 0),
    **dict.fromkeys((0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56), 1),
    **dict.fromkeys((0x60, 0x61), 2),
    **dict.fromkeys((0x70, 0x71, 0x72, 0x73), 4),
    **dict.fromkeys((0x80, 0x81, 0x82, 0x83), 8),
    0x98: 16,
}


def skip(data: bytes, pos: int) -> int:
    """Return the position after the value at ``pos`` without decoding it."""
    _need(data, pos + 1)
    code = data[pos]
    pos += 1
    width = _FIXED_WIDTHS.get(code)
    if width is not None:
        end = pos + width
    elif code == 0x00:
        return skip(data, skip(data, pos))
    elif code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
        _need(data, pos + 1)
        end = pos + 1 + data[pos]
    elif code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
        _need(data, pos + 4)
        end = pos + 4 + _U32.unpack_from(data, pos)[0]
    else:
        raise DecodeError(f"unknown AMQP constructor {code:#04x}")
    _need(data, end)
    return end
