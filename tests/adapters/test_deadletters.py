"""Dead letters: where a failed batch goes, what its blob holds, and how write failures read.

The container is a fake here (tests/adapters/wire/test_deadletters.py writes to Azurite).
"""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import pytest
from azure.core import exceptions as azure_errors

from eventhub_balancer import errors
from eventhub_balancer.adapters import deadletters, deliveries

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


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        deadletters.build([], error="e", attempts=1, pod="p", epoch=1, now=T0)
