"""The pod's acknowledgement patch goes on after its caller stopped waiting (`podpatches`).

Each patch is held by the test until it lets it answer, so that nothing depends on how fast
the machine is: a caller that waited its bound gets False, the request is not sent again,
a later call takes its answer, and newer annotations are sent only once it has ended.
"""

from __future__ import annotations

import threading

import pytest

from eventhub_balancer.adapters import podpatches

SHORT_S = 0.05
LONG_S = 10.0


class HeldServer:
    """Takes each patch, and answers it only when the test says so."""

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []
        self.answer = threading.Event()
        self.error: Exception | None = None

    def send(self, annotations: dict[str, str]) -> None:
        self.sent.append(annotations)
        assert self.answer.wait(LONG_S)
        if self.error is not None:
            raise self.error


async def test_a_late_answer_is_taken_and_nothing_is_sent_twice() -> None:
    server = HeldServer()
    patches = podpatches.Patches(server.send)
    assert not await patches.write({"a": "1"}, within=SHORT_S)
    assert patches.waiting
    assert not await patches.write({"a": "1"}, within=SHORT_S)
    server.answer.set()
    assert await patches.write({"a": "1"}, within=LONG_S)
    assert server.sent == [{"a": "1"}]
    assert not patches.waiting


async def test_newer_annotations_wait_for_the_patch_before_them() -> None:
    server = HeldServer()
    patches = podpatches.Patches(server.send)
    assert not await patches.write({"a": "1"}, within=SHORT_S)
    assert not await patches.write({"a": "2"}, within=SHORT_S)
    assert server.sent == [{"a": "1"}]  # one request at a time, in order
    server.answer.set()
    assert await patches.write({"a": "2"}, within=LONG_S)
    assert server.sent == [{"a": "1"}, {"a": "2"}]


async def test_a_late_error_is_raised_to_the_next_call_for_the_same_annotations() -> None:
    server = HeldServer()
    server.error = ConnectionResetError("gone")
    patches = podpatches.Patches(server.send)
    assert not await patches.write({"a": "1"}, within=SHORT_S)
    server.answer.set()
    with pytest.raises(ConnectionResetError):
        await patches.write({"a": "1"}, within=LONG_S)
    server.error = None
    assert await patches.write({"a": "1"}, within=LONG_S)  # sent again
    assert server.sent == [{"a": "1"}, {"a": "1"}]
