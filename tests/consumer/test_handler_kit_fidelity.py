"""``eventhub_balancer.testing`` says what the runtime would do with a batch, also when the
handler misbehaves: each case here is checked against what `attempts.BatchAttempts` does with
the same handler (tests/consumer/test_handler_misbehaviour.py, tests/consumer/test_runtime.py).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub._pyamqp import _decode as sdk_decode
from azure.eventhub._pyamqp import _encode as sdk_encode
from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

from eventhub_balancer import testing
from eventhub_balancer.adapters import receiving
from eventhub_balancer.consumer import BatchContext, Event


def test_a_revoked_batch_counts_no_failed_attempt() -> None:
    """The runtime abandons a batch cut off by a release without counting an attempt: the next
    owner processes it, and no failure policy applies."""

    async def slow(events: Sequence[Event], context: BatchContext) -> None:
        await asyncio.sleep(60)

    outcome = testing.run(slow, testing.events(["a"]), revoke_after=0.05)
    assert outcome.revoked
    assert not outcome.checkpointed
    assert outcome.failed_partitions == frozenset()


def test_a_handler_that_swallows_its_cancellation_is_still_revoked() -> None:
    """The runtime never checkpoints a batch whose call it cancelled at the release deadline,
    however the call ends; the kit used to report such a handler as checkpointed."""
    cleaned: list[str] = []

    async def stubborn(events: Sequence[Event], context: BatchContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cleaned.append("cleanup")  # and returns as if done

    outcome = testing.run(stubborn, testing.events(["a"]), revoke_after=0.05)
    assert cleaned == ["cleanup"]
    assert outcome.revoked
    assert not outcome.checkpointed
    assert outcome.error is None


def test_a_handler_whose_cleanup_fails_on_cancellation_is_revoked_not_failed() -> None:
    async def messy(events: Sequence[Event], context: BatchContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("rollback failed") from None

    outcome = testing.run(messy, testing.events(["a"]), revoke_after=0.05)
    assert outcome.revoked
    assert outcome.failed_partitions == frozenset()


async def raise_cancelled(events: Sequence[Event], context: BatchContext) -> None:
    raise asyncio.CancelledError()


def exit_in_thread(events: Sequence[Event], context: BatchContext) -> None:
    sys.exit("no config for this tenant")


async def exit_on_loop(events: Sequence[Event], context: BatchContext) -> None:
    raise SystemExit(3)


@pytest.mark.parametrize(
    ("handler", "kind", "text"),
    [
        (raise_cancelled, asyncio.CancelledError, "the handler raised it"),
        (exit_in_thread, SystemExit, "no config for this tenant"),
        (exit_on_loop, SystemExit, "3"),
    ],
    ids=["CancelledError", "SystemExit in a thread", "SystemExit on the loop"],
)
def test_a_base_exception_is_a_failed_attempt_as_in_the_runtime(
    handler: Any, kind: type[BaseException], text: str
) -> None:
    """The runtime counts these as failed attempts; the kit let them out of ``run`` (a
    SystemExit ended the test session's process)."""
    outcome = testing.run(handler, testing.events(["a"], partition="2"))
    assert isinstance(outcome.error, kind)
    assert str(outcome.error) == text
    assert not outcome.checkpointed
    assert not outcome.revoked
    assert outcome.failed_partitions == {"2"}


def test_the_handler_gets_a_list_of_its_own_as_in_the_runtime() -> None:
    batch = testing.events(["a", "b", "c"])

    def consuming(events: Any, context: BatchContext) -> None:
        while events:
            events.pop()

    assert testing.run(consuming, batch).checkpointed
    assert [e.body for e in batch] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("body", [1, [1, 2], 2.5, None], ids=["int", "list", "float", "None"])
def test_a_body_that_is_not_bytes_text_or_a_mapping_is_refused(body: Any) -> None:
    """``bytes(1)`` is one zero byte and ``bytes([1, 2])`` two raw bytes: such a body used to
    become bytes that no producer sent, without a word."""
    with pytest.raises(TypeError) as caught:
        testing.events(["fine", body])
    assert f"body 1 is a {type(body).__name__}" in str(caught.value)
    assert "bytes, a str (sent as UTF-8) or a mapping (sent as JSON)" in str(caught.value)


def test_bytes_like_bodies_are_taken_as_they_are() -> None:
    made = testing.events([b"a", bytearray(b"b"), memoryview(b"c")])
    assert [e.body for e in made] == [b"a", b"b", b"c"]


def as_the_runtime_receives(properties: dict[str, Any]) -> dict[str, Any]:
    """What a handler in a pod gets for an event sent with ``properties``: the SDK's own AMQP
    encoding and decoding, then the runtime's copy (`receiving.to_event`)."""
    sent = EventData(b"body")
    sent.properties = properties
    message = PyamqpTransport().to_outgoing_amqp_message(sent.raw_amqp_message)
    payload = sdk_encode.encode_payload(bytearray(), message)
    received = EventData._from_message(sdk_decode.decode_payload(memoryview(payload)))
    return dict(receiving.to_event("0", received).properties)


def test_properties_are_what_a_handler_in_a_pod_gets() -> None:
    """The SDK delivers an application property sent as text as bytes (its AMQP decoder
    reads strings and binary alike): a handler tested with ``properties={"tenant": "acme"}``
    passed on ``== "acme"`` and, in the pod, never matched ``b"acme"``."""
    sent: dict[str, Any] = {
        "tenant": "acme",
        "count": 3,
        "raw": b"\x00\x01",
        "flag": True,
        "ratio": 1.5,
        "tags": ["a", 1],
        "nested": {"k": "v"},
    }
    made = testing.events(["x"], properties=sent)[0]
    assert dict(made.properties) == as_the_runtime_receives(sent)
    assert made.properties["tenant"] == b"acme"
