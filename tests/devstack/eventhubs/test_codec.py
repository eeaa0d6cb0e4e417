"""The emulator's AMQP codec against the SDK's own decoder and encoder (pure, no I/O)."""

from __future__ import annotations

import uuid

import pytest
from azure.eventhub._pyamqp import _decode as sdk_decode
from azure.eventhub._pyamqp import _encode as sdk_encode
from azure.eventhub._pyamqp.message import Message, Properties

from eventhub_balancer_devstack.eventhubs import addresses, events, hubs
from eventhub_balancer_devstack.eventhubs.amqp import decoding, encoding, frames, types
from eventhub_balancer_devstack.eventhubs.amqp import performatives as perf


@pytest.mark.parametrize(
    ("frame", "count"),
    [
        (perf.open_(container_id="c", max_frame_size=65536, channel_max=10), 10),
        (perf.begin(channel=0, remote_channel=0, next_outgoing_id=0, incoming_window=5), 8),
        (
            perf.flow(
                channel=0,
                next_incoming_id=0,
                incoming_window=1,
                next_outgoing_id=0,
                outgoing_window=1,
                handle=1,
                delivery_count=0,
                link_credit=5,
            ),
            11,
        ),
        (perf.disposition(channel=0, first=1, last=1, state=perf.ACCEPTED_STATE), 6),
        (perf.detach(channel=0, handle=1, closed=True, err=None), 3),
        (perf.end(channel=0), 1),
        (perf.close(), 1),
        (perf.sasl_outcome(0), 2),
    ],
)
def test_performatives_are_full_length(frame: bytes, count: int) -> None:
    _code, fields = sdk_decode.decode_frame(memoryview(frame)[8:])
    assert len(fields) == count


def test_transfer_is_what_the_sdk_reads() -> None:
    frame = perf.transfer(
        channel=3,
        handle=7,
        delivery_id=9,
        message_format=0,
        settled=True,
        more=False,
        payload=b"\x00\x53\x75\xa0\x02hi",
    )
    code, fields = sdk_decode.decode_frame(memoryview(frame)[8:])
    assert code == perf.TRANSFER
    assert fields[:6] == [7, 9, b"\x00\x00\x00\x09", 0, True, False]
    assert sdk_decode.decode_payload(fields[11]).data == [b"hi"]


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        5,
        -300,
        2**40,
        "text",
        types.Symbol("sym"),
        b"\x00bin",
        [1, "a"],
        {"k": [types.UInt(3)]},
        types.Timestamp(1700000000000),
        uuid.uuid4(),
        types.ULong(2**63),
    ],
)
def test_roundtrip(value: object) -> None:
    decoded, _ = decoding.decode(encoding.encode(value))
    assert decoded == value
    assert type(decoded) is type(value) or (
        isinstance(value, bool | int) and not isinstance(value, types.UInt)
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc0\x05\x03",
        b"\xa1\x10abc",
        b"\xff",
        b"\xd0\x00\x00\x00\x04\x00\x00\x00\x09",
        b"\xc1\x03\x01\x40",
    ],
)
def test_malformed_values_raise(data: bytes) -> None:
    with pytest.raises(decoding.DecodeError):
        decoding.decode(data)


def test_bad_frame_header_raises() -> None:
    with pytest.raises(frames.FramingError):
        frames.next_frame_size(
            bytearray(b"\x00\x00\x00\x04\x02\x00\x00\x00"), 0, max_frame_size=512
        )
    with pytest.raises(frames.FramingError):
        frames.next_frame_size(
            bytearray(b"\x00\x10\x00\x00\x02\x00\x00\x00"), 0, max_frame_size=512
        )


def test_stored_event_is_what_the_sdk_decodes() -> None:
    message = Message(
        data=[b"body"],
        properties=Properties(message_id="m1"),
        application_properties={"a": 1},
        message_annotations={b"x-opt-partition-key": "key-1", b"custom": 5},
    )
    encoded = bytes(sdk_encode.encode_payload(bytearray(), message))
    incoming = events.parse(encoded)
    assert incoming.partition_key == "key-1"
    stored = events.store(
        incoming,
        sequence_number=42,
        offset=4200,
        enqueued_ms=1_700_000_000_000,
        partition_key="key-1",
    )
    decoded = sdk_decode.decode_payload(memoryview(stored.payload))
    assert decoded.data == [b"body"]
    assert decoded.message_annotations == {
        b"x-opt-partition-key": b"key-1",
        b"custom": 5,
        b"x-opt-sequence-number": 42,
        b"x-opt-offset": b"4200",
        b"x-opt-enqueued-time": 1_700_000_000_000,
    }


def test_selector_filters() -> None:
    def selector(text: str) -> dict[object, object]:
        key = types.Symbol(addresses.SELECTOR_FILTER)
        return {key: types.Described(key, text)}

    assert addresses.start_position(None) == addresses.EARLIEST
    latest = addresses.start_position(selector("amqp.annotation.x-opt-offset > '@latest'"))
    assert latest.field == "latest"
    seq = addresses.start_position(selector("amqp.annotation.x-opt-sequence-number >= '12'"))
    assert (seq.field, seq.value, seq.inclusive) == ("sequence", 12, True)
    with pytest.raises(addresses.InvalidAddress):
        addresses.start_position(selector("amqp.annotation.x-opt-offset < '3'"))


def test_addresses() -> None:
    parsed = addresses.parse("amqps://127.0.0.1:5672/orders/ConsumerGroups/$Default/Partitions/3")
    assert (parsed.kind, parsed.hub, parsed.consumer_group, parsed.partition) == (
        "consumer",
        "orders",
        "$Default",
        "3",
    )
    assert addresses.parse("amqps://h:1/orders/Partitions/0").kind == "partition"
    assert addresses.parse("$cbs").kind == "cbs"
    with pytest.raises(addresses.InvalidAddress):
        addresses.parse("amqps://h:1/a/b")


def test_owner_level_rules() -> None:
    readers = hubs.Readers()
    assert readers.claim("plain", None) == []
    assert readers.claim("epoch-1", 1) == ["plain"]
    with pytest.raises(hubs.OwnerLevelConflict):
        readers.claim("lower", 0)
    with pytest.raises(hubs.OwnerLevelConflict):
        readers.claim("none", None)
    assert readers.claim("epoch-1-again", 1) == ["epoch-1"]
    readers.release("epoch-1-again")
    assert readers.claim("plain-again", None) == []


def test_retention_keeps_the_newest() -> None:
    partition = hubs.Partition(hub="h", partition_id="0", retention_events=3)
    event = events.parse(b"\x00\x53\x75\xa0\x01x")
    for _ in range(10):
        partition.append([event], partition_key=None, now_ms=1)
    info = partition.info()
    assert (info.begin_sequence_number, info.last_enqueued_sequence_number) == (7, 9)
    assert [e.sequence_number for e in partition.read(0, 10)] == [7, 8, 9]
