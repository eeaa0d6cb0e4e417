"""The pod's acknowledgement patch goes on after its caller stopped waiting (`podpatches`).

Each patch is held by the test until it lets it answer, so that nothing depends on how fast
the machine is: a caller that waited its bound gets None, the request is not sent again,
a later call takes its answer, and newer annotations are sent only once it has ended.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import looptime
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

    def send(self, annotations: dict[str, str]) -> str:
        self.sent.append(annotations)
        assert self.answer.wait(LONG_S)
        if self.error is not None:
            raise self.error
        return str(len(self.sent))  # the object's resourceVersion once patched


async def test_a_late_answer_is_taken_and_nothing_is_sent_twice() -> None:
    server = HeldServer()
    patches = podpatches.Patches(server.send)
    assert await patches.write({"a": "1"}, within=SHORT_S) is None
    assert patches.waiting
    assert await patches.write({"a": "1"}, within=SHORT_S) is None
    server.answer.set()
    assert await patches.write({"a": "1"}, within=LONG_S) == "1"  # the answer of the first
    assert server.sent == [{"a": "1"}]
    assert not patches.waiting


async def test_newer_annotations_wait_for_the_patch_before_them() -> None:
    server = HeldServer()
    patches = podpatches.Patches(server.send)
    assert await patches.write({"a": "1"}, within=SHORT_S) is None
    assert await patches.write({"a": "2"}, within=SHORT_S) is None
    assert server.sent == [{"a": "1"}]  # one request at a time, in order
    server.answer.set()
    assert await patches.write({"a": "2"}, within=LONG_S) == "2"
    assert server.sent == [{"a": "1"}, {"a": "2"}]


async def test_a_late_error_is_raised_to_the_next_call_for_the_same_annotations() -> None:
    server = HeldServer()
    server.error = ConnectionResetError("gone")
    patches = podpatches.Patches(server.send)
    assert await patches.write({"a": "1"}, within=SHORT_S) is None
    server.answer.set()
    with pytest.raises(ConnectionResetError):
        await patches.write({"a": "1"}, within=LONG_S)
    server.error = None
    assert await patches.write({"a": "1"}, within=LONG_S)  # sent again
    assert server.sent == [{"a": "1"}, {"a": "1"}]


class PausedServer:
    """Takes each patch and answers it when the test runs it (on the loop's thread), so that
    on fake time the answer comes exactly when the test says, never raced by a thread."""

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []
        self.requests: list[Callable[[], None]] = []

    def send(self, annotations: dict[str, str]) -> str:
        self.sent.append(annotations)
        return str(len(self.sent))

    def spawn(self, request: Callable[[], None]) -> None:
        self.requests.append(request)


def pause(seconds: float) -> None:
    """The process stopped for ``seconds`` (SIGSTOP, a frozen container, CPU throttling): the
    loop's clock moves on while the loop does not turn, so its timers fire late."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, looptime.LoopTimeEventLoop)
    loop.setup_looptime(start=loop.time() + seconds)


@pytest.mark.looptime
async def test_an_answer_a_moment_after_a_pause_is_taken_not_given_up() -> None:
    """Frozen for 20 s with a patch in flight: once the process runs again, the end of the
    wait is long past and fired first, a moment ahead of the request's thread taking the
    answer the API server gave meanwhile. The acknowledgement was reported as 'the API
    server has not answered yet', though the pod itself was paused."""
    server = PausedServer()
    patches = podpatches.Patches(server.send, spawn=server.spawn)
    write = asyncio.create_task(patches.write({"a": "1"}, within=2.0))
    await asyncio.sleep(0.5)
    assert len(server.requests) == 1
    assert not write.done()
    pause(20)
    asyncio.get_running_loop().call_later(0.01, server.requests[0])  # its thread runs again
    start = asyncio.get_running_loop().time()
    assert await write
    assert asyncio.get_running_loop().time() - start < podpatches.RESUMED_SETTLE_S + 0.01
    assert server.sent == [{"a": "1"}]


@pytest.mark.looptime
async def test_a_slow_answer_is_still_given_up_after_the_bound() -> None:
    server = PausedServer()
    patches = podpatches.Patches(server.send, spawn=server.spawn)
    start = asyncio.get_running_loop().time()
    assert await patches.write({"a": "1"}, within=2.0) is None
    assert asyncio.get_running_loop().time() - start == pytest.approx(2.0)
    assert patches.waiting


@pytest.mark.looptime
async def test_no_answer_after_a_pause_is_given_up_a_moment_after_it() -> None:
    """The API server really did not answer: the pause buys one short settle, not a new wait
    per pause, and not the whole bound again."""
    server = PausedServer()
    patches = podpatches.Patches(server.send, spawn=server.spawn)
    write = asyncio.create_task(patches.write({"a": "1"}, within=2.0))
    await asyncio.sleep(0.5)
    pause(20)
    start = asyncio.get_running_loop().time()
    assert await write is None
    assert asyncio.get_running_loop().time() - start == pytest.approx(podpatches.RESUMED_SETTLE_S)
    assert patches.waiting
