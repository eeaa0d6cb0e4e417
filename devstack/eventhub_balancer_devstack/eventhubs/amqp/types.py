"""AMQP values that Python's own types cannot tell apart.

AMQP distinguishes a symbol from a string, a ulong from a long, a timestamp from an integer.
The decoder returns these wrappers and the encoder reads them back, so that a value echoed
to a client (a management request's ``message-id`` as ``correlation-id``) keeps its type.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class Symbol(str):
    """An AMQP symbol (ASCII), as used for keys of annotations and for conditions."""

    __slots__ = ()


class UByte(int):
    """An AMQP ubyte."""

    __slots__ = ()


class UShort(int):
    """An AMQP ushort."""

    __slots__ = ()


class UInt(int):
    """An AMQP uint (handles, delivery ids, windows)."""

    __slots__ = ()


class ULong(int):
    """An AMQP ulong (descriptors, message ids)."""

    __slots__ = ()


class Timestamp(int):
    """Milliseconds since the Unix epoch, encoded as an AMQP timestamp."""

    __slots__ = ()


class Int(int):
    """A 32-bit signed AMQP int (an unadorned Python ``int`` encodes as a long)."""

    __slots__ = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Described:
    """A described value: performatives, sections, sources, filters, outcomes."""

    descriptor: Any
    value: Any


@dataclasses.dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: every element has the same constructor (``code``)."""

    code: int
    items: tuple[Any, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """Bytes already encoded as one AMQP value, inserted as they are."""

    data: bytes
