"""kubectl's protobuf bodies, decoded as the JSON a client would send (pure, no server)."""

from __future__ import annotations

import base64

import pytest

from eventhub_balancer_devstack.kube import protobufs


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative numbers are ten bytes of two's complement
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _number(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _bytes(1, api_version.encode()) + _bytes(2, kind.encode())
    return protobufs.MAGIC + _bytes(1, type_meta) + _bytes(2, raw) + _bytes(3, b"") + _bytes(4, b"")


def _metadata(name: str) -> bytes:
    # As Go writes it: every string field, even empty, and an empty creationTimestamp.
    empty = b"".join(_bytes(n, b"") for n in (2, 3, 4, 5, 6))
    return _bytes(1, _bytes(1, name.encode()) + empty + _number(7, 0) + _bytes(8, b""))


def test_a_secret_with_its_zeros_left_out() -> None:
    entry = _bytes(1, b"k") + _bytes(2, b"\x00\xff")
    raw = _metadata("s") + _bytes(2, entry) + _bytes(3, b"Opaque")
    assert protobufs.decode(_envelope("v1", "Secret", raw)) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"k": base64.b64encode(b"\x00\xff").decode()},
        "type": "Opaque",
    }


def test_a_pointer_keeps_its_zero_and_a_negative_number_its_sign() -> None:
    spec = _number(1, 0) + _number(5, 0) + _number(6, -1)  # replicas 0, minReadySeconds 0
    body = protobufs.decode(_envelope("apps/v1", "Deployment", _metadata("d") + _bytes(2, spec)))
    assert body["spec"] == {"replicas": 0, "revisionHistoryLimit": -1}


def test_an_unknown_field_with_a_value_is_refused_and_an_empty_one_skipped() -> None:
    skipped = _metadata("c") + _bytes(15, b"") + _bytes(16, _number(1, 0))
    assert protobufs.decode(_envelope("v1", "ConfigMap", skipped))["metadata"] == {"name": "c"}
    with pytest.raises(protobufs.Unreadable, match="field 15 of ConfigMap"):
        protobufs.decode(_envelope("v1", "ConfigMap", _metadata("c") + _bytes(15, b"x")))


def test_kinds_it_does_not_know_and_bodies_that_are_not_protobuf() -> None:
    with pytest.raises(protobufs.Unreadable, match="kind Pod of v1"):
        protobufs.decode(_envelope("v1", "Pod", _metadata("p")))
    with pytest.raises(protobufs.ProtobufError, match="prefix"):
        protobufs.decode(b'{"kind": "ConfigMap"}')
    with pytest.raises(protobufs.ProtobufError, match="ends inside"):
        protobufs.decode(protobufs.MAGIC + b"\x0a\x05ab")
