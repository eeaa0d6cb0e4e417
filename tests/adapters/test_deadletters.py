"""Dead letters: where a failed batch goes, what its blob holds, and how write failures read.

The container is a fake here (tests/adapters/wire/test_deadletters.py writes to Azurite).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import json
from typing import Any

import pytest
from azure.core import exceptions as azure_errors

from eventhub_balancer import errors
from eventhub_balancer.adapters import deadletterreplays, deadletters, deadlettersends, deliveries

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def event(n: int, body: bytes) -> deliveries.ReceivedEvent:
    return deliveries.ReceivedEvent(
        partition="3",
        sequence_number=n,
        offset=str(n * 10),
        enqueued_time=T0 + datetime.timedelta(seconds=n),
        partition_key="k",
        properties={"n": n, "raw": b"\xff\x00"},
        body=body,
    )


class FakeContainer:
    def __init__(self, failure: BaseException | None = None) -> None:
        self.blobs: dict[str, bytes] = {}
        self.failure = failure

    async def upload_blob(self, name: str, data: bytes, **options: Any) -> None:
        if self.failure is not None:
            raise self.failure
        assert options["overwrite"] is True
        self.blobs[name] = data

    def get_blob_client(self, name: str) -> Any:
        """The partition's checkpoint blob, read before a dead letter: none here (the
        fencing of dead letters is tested on Azurite, wire/test_deadletter_fencing.py)."""
        return self

    async def get_blob_properties(self) -> Any:
        if self.failure is not None:
            raise self.failure
        raise azure_errors.ResourceNotFoundError("BlobNotFound")


def writer(container: FakeContainer) -> deadletters.DeadLetterWriter:
    return deadletters.DeadLetterWriter(
        container,  # type: ignore[arg-type]
        fully_qualified_namespace="Shop.servicebus.windows.net",
        eventhub_name="Orders",
        consumer_group="$Default",
    )


def test_the_blob_sits_beside_the_checkpoints_named_after_the_batch() -> None:
    name = deadletters.blob_name(
        fully_qualified_namespace="Shop.servicebus.windows.net",
        eventhub_name="Orders",
        consumer_group="$Default",
        partition="3",
        first_sequence_number=17,
        last_sequence_number=42,
    )
    assert name == "shop.servicebus.windows.net/orders/$default/deadletter/3/17-42.json"


async def test_a_dead_letter_holds_every_event_and_the_error() -> None:
    container = FakeContainer()
    name = await writer(container).write(
        [event(17, b'{"ok": 1}'), event(18, b"\xff\xfe")],
        error="ValueError: bad",
        attempts=10,
        pod="pod-a",
        epoch=4,
    )
    assert name == "shop.servicebus.windows.net/orders/$default/deadletter/3/17-18.json"
    body = json.loads(container.blobs[name])
    assert {k: body[k] for k in ("partition", "firstSequenceNumber", "lastSequenceNumber")} == {
        "partition": "3",
        "firstSequenceNumber": 17,
        "lastSequenceNumber": 18,
    }
    assert (body["error"], body["attempts"], body["pod"], body["epoch"]) == (
        "ValueError: bad",
        10,
        "pod-a",
        4,
    )
    first, second = body["events"]
    assert first == {
        "partition": "3",
        "sequenceNumber": 17,
        "offset": "170",
        "enqueuedTime": "2026-01-01T00:00:17+00:00",
        "partitionKey": "k",
        "properties": {"n": 17, "raw": base64.b64encode(b"\xff\x00").decode()},
        "bodyEncoding": "utf-8",
        "body": '{"ok": 1}',
    }
    assert second["bodyEncoding"] == "base64"
    assert base64.b64decode(second["body"]) == b"\xff\xfe"


@pytest.mark.parametrize(
    ("failure", "kind", "text"),
    [
        (azure_errors.ClientAuthenticationError("no"), errors.ConfigurationError, "write access"),
        (azure_errors.ServiceRequestError("down"), errors.CheckpointStoreUnreachable, "dead"),
        (ConnectionResetError(), errors.CheckpointStoreUnreachable, "ConnectionResetError"),
        (TimeoutError(), errors.CheckpointStoreUnreachable, "no answer within 30 s"),
    ],
)
async def test_a_failed_write_says_why_and_is_ours_to_retry(
    failure: BaseException, kind: type[Exception], text: str
) -> None:
    with pytest.raises(kind, match=text):
        await writer(FakeContainer(failure)).write(
            [event(1, b"x")], error="e", attempts=1, pod="p", epoch=1
        )


def forbidden(code: str) -> azure_errors.HttpResponseError:
    error = azure_errors.HttpResponseError(message="This request is not authorized")
    error.status_code = 403
    error.error_code = code  # type: ignore[attr-defined]
    return error


@pytest.mark.parametrize(
    ("code", "says"),
    [("AuthorizationPermissionMismatch", "sp=rcwl"), ("AuthorizationFailure", "expired")],
)
async def test_a_forbidden_write_says_which_permission_to_grant(code: str, says: str) -> None:
    """A role or SAS that may read but not write is refused with 403 at every attempt: the
    partition's report says what to grant, as the checkpoint store's own refusals do, not a
    bare status to wait out."""
    with pytest.raises(errors.ConfigurationError) as raised:
        await writer(FakeContainer(forbidden(code))).write(
            [event(1, b"x")], error="e", attempts=1, pod="p", epoch=1
        )
    message = str(raised.value)
    assert message.startswith("dead-letter write of ")
    assert "HTTP 403" in message
    assert says in message


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        deadletters.build([], error="e", attempts=1, pod="p", epoch=1, now=T0)


# --- the read side (``ehb deadletters``); tests/adapters/wire/ runs it against Azurite ---


def test_a_dead_letter_decodes_back_to_the_events_the_handler_got() -> None:
    events = [event(7, "héllo".encode()), event(8, b"\xff\xfe\x00")]
    body = json.loads(
        deadletters.encode(
            deadletters.build(events, error="boom", attempts=3, pod="p", epoch=1, now=T0)
        )
    )
    decoded = deadletters.decode_events(body)
    assert [e.body for e in decoded] == ["héllo".encode(), b"\xff\xfe\x00"]
    assert [
        (e.partition, e.sequence_number, e.offset, e.enqueued_time, e.partition_key)
        for e in decoded
    ] == [
        ("3", 7, "70", T0 + datetime.timedelta(seconds=7), "k"),
        ("3", 8, "80", T0 + datetime.timedelta(seconds=8), "k"),
    ]
    # Bytes properties were stored as text (base64 when not UTF-8): they come back as text.
    assert decoded[0].properties == {"n": 7, "raw": base64.b64encode(b"\xff\x00").decode()}


def test_a_blob_changed_by_hand_reads_as_an_error_that_says_so() -> None:
    body: Any = {"events": [{"partition": "0", "bodyEncoding": "base64", "body": "%%"}]}
    with pytest.raises(errors.ConfigurationError, match="event 0 of the dead letter"):
        deadletters.decode_events(body)


def reader() -> deadletterreplays.DeadLetterReader:
    return deadletterreplays.DeadLetterReader(
        object(),  # type: ignore[arg-type]
        fully_qualified_namespace="Shop.servicebus.windows.net",
        eventhub_name="Orders",
        consumer_group="$Default",
    )


@pytest.mark.parametrize(
    "typed",
    [
        "3/5-6",
        "3/5-6.json",
        " 3/5-6 ",
        "shop.servicebus.windows.net/orders/$default/deadletter/3/5-6.json",
        "Shop.servicebus.windows.net/Orders/$Default/deadletter/3/5-6.json",
    ],
)
def test_a_dead_letter_is_named_as_listed_or_in_full(typed: str) -> None:
    expected = "shop.servicebus.windows.net/orders/$default/deadletter/3/5-6.json"
    assert reader().resolve(typed) == expected
    assert reader().short_name(expected) == "3/5-6"


@pytest.mark.parametrize(
    "typed", ["", "3", "3/5", "3/5-x", "other/orders/$default/deadletter/3/5-6.json", "../3/5-6"]
)
def test_a_name_of_no_dead_letter_is_refused_naming_the_argument(typed: str) -> None:
    with pytest.raises(errors.InvalidInput, match=r"BLOB: .*ehb deadletters list"):
        reader().resolve(typed)


def test_a_replay_keeps_keys_and_otherwise_the_partition() -> None:
    keyed = [event(1, b"a"), event(2, b"b")]
    unkeyed = [dataclasses.replace(event(3, b"c"), partition_key=None)]
    groups = deadlettersends.send_groups([*keyed, *unkeyed, event(4, b"d")])
    assert [(target, [e.sequence_number for e in run]) for target, run in groups] == [
        ({"partition_key": "k"}, [1, 2]),
        ({"partition_id": "3"}, [3]),
        ({"partition_key": "k"}, [4]),
    ]


def test_a_replayed_event_says_which_dead_letter_it_comes_from() -> None:
    data = deadlettersends.event_data(event(1, b"body"), replay_of="x/deadletter/3/1-1.json")
    assert data.body_as_str() == "body"
    assert data.properties == {
        "n": 1,
        "raw": b"\xff\x00",
        deadlettersends.REPLAY_PROPERTY: "x/deadletter/3/1-1.json",
    }


@pytest.mark.parametrize(
    ("error", "line"),
    [("boom", "boom"), ("\n  ValueError: bad\nTraceback ...", "ValueError: bad"), ("", "")],
)
def test_an_error_shows_its_first_line(error: str, line: str) -> None:
    assert deadletters.first_line(error) == line


class Batch(list[Any]):
    def add(self, data: Any) -> None:
        self.append(data)


class BrokenProducer:
    """A producer whose send never succeeds: it hangs (the hub stopped answering) or fails."""

    def __init__(self, failure: Exception | None) -> None:
        self.failure = failure

    async def __aenter__(self) -> BrokenProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def create_batch(self, **target: str) -> Batch:
        return Batch()

    async def send_batch(self, batch: Batch) -> None:
        if self.failure is not None:
            raise self.failure
        await asyncio.Event().wait()


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("failure", "ending"),
    [(None, "(0 of 1 event sent)"), (OSError("reset"), "after 0 of 1 event (OSError: reset)")],
)
async def test_a_failed_replay_of_one_event_counts_it_in_the_singular(
    monkeypatch: pytest.MonkeyPatch, failure: Exception | None, ending: str
) -> None:
    monkeypatch.setattr(deadlettersends.eventhubs, "producer", lambda _: BrokenProducer(failure))
    where = deadlettersends.eventhubs.Coordinates(
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        connection_string="Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
    )
    with pytest.raises(errors.EventHubUnreachable) as caught:
        await deadlettersends.replay_to_hub(where, [event(1, b"a")], replay_of="x", limit_seconds=5)
    assert str(caught.value).endswith(ending)
