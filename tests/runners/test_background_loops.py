"""`runners.BackgroundLoop`: a loop in a thread that starts, answers, fails loudly and stops."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator

import pytest

from eventhub_balancer import runners

#: The bound of every wait in these tests (seconds); none of them should come near it.
WAIT = 5.0


@pytest.fixture
def name() -> str:
    return f"test-loop-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def background(name: str) -> Iterator[runners.BackgroundLoop]:
    loop = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    try:
        yield loop
    finally:
        loop.stop()


def thread_names() -> set[str]:
    return {t.name for t in threading.enumerate()}


async def thread_name() -> str:
    return threading.current_thread().name


async def fail() -> None:
    raise ValueError("from the loop")


async def forever() -> None:
    await asyncio.Event().wait()


def test_runs_coroutines_on_its_own_thread(name: str) -> None:
    with runners.BackgroundLoop(name=name, timeout=WAIT) as background:
        assert name in thread_names()
        assert background.running
        assert background.run(thread_name()) == name
        assert background.call(lambda: threading.current_thread().name) == name
    assert not background.running


def test_the_thread_is_gone_and_the_loop_closed_after_stop(name: str) -> None:
    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    loop = background.loop
    background.stop()
    assert name not in thread_names()
    assert loop.is_closed()


def test_stop_is_idempotent_and_harmless_before_start(name: str) -> None:
    never_started = runners.BackgroundLoop(name=name, timeout=WAIT)
    never_started.stop()
    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    background.stop()
    background.stop()
    assert not background.running


def test_no_work_is_taken_after_stop(name: str) -> None:
    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    background.stop()
    with pytest.raises(RuntimeError, match="not running"):
        background.run(thread_name())
    with pytest.raises(RuntimeError, match="not running"):
        background.call_soon(lambda: None)


def test_a_loop_starts_only_once(background: runners.BackgroundLoop) -> None:
    with pytest.raises(RuntimeError, match="only once"):
        background.start()


def test_a_coroutines_exception_reaches_the_caller(background: runners.BackgroundLoop) -> None:
    with pytest.raises(ValueError, match="from the loop"):
        background.run(fail())


def test_a_functions_exception_reaches_the_caller(background: runners.BackgroundLoop) -> None:
    def broken() -> int:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        background.call(broken)


def test_a_submitted_coroutines_exception_is_in_its_future(
    background: runners.BackgroundLoop,
) -> None:
    future = background.submit(fail())
    with pytest.raises(ValueError, match="from the loop"):
        future.result(WAIT)


def test_a_slow_result_times_out_and_its_coroutine_is_cancelled(
    background: runners.BackgroundLoop,
) -> None:
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError, match="no result within"):
        background.run(slow(), timeout=0.05)
    assert cancelled.wait(WAIT)


def test_a_timeout_inside_the_coroutine_is_not_mistaken_for_ours(
    background: runners.BackgroundLoop,
) -> None:
    async def times_out() -> None:
        raise TimeoutError("the coroutine's own")

    with pytest.raises(TimeoutError, match="the coroutine's own"):
        background.run(times_out())


def test_waiting_from_the_loops_own_thread_is_refused(background: runners.BackgroundLoop) -> None:
    async def nested() -> str:
        return background.run(thread_name())

    with pytest.raises(RuntimeError, match="deadlocks"):
        background.run(nested())


def test_call_soon_runs_the_callback_on_the_loop(background: runners.BackgroundLoop) -> None:
    seen: list[str] = []
    done = threading.Event()

    def callback() -> None:
        seen.append(threading.current_thread().name)
        done.set()

    background.call_soon(callback)
    assert done.wait(WAIT)
    assert seen == [background.name]


def test_stop_cancels_the_tasks_still_running(name: str) -> None:
    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    future = background.submit(forever())
    background.stop()
    assert future.cancelled()


def test_held_contexts_stay_entered_until_stop_and_leave_in_reverse(name: str) -> None:
    log: list[str] = []

    def context(label: str) -> contextlib.AbstractAsyncContextManager[str]:
        @contextlib.asynccontextmanager
        async def held() -> AsyncIterator[str]:
            log.append(f"enter {label}")
            try:
                yield label.upper()
            finally:
                log.append(f"leave {label}")

        return held()

    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    assert background.enter(lambda: context("a")) == "A"
    assert background.enter(lambda: context("b")) == "B"
    assert log == ["enter a", "enter b"]
    background.stop()
    assert log == ["enter a", "enter b", "leave b", "leave a"]


def test_an_error_on_entering_reaches_the_caller(background: runners.BackgroundLoop) -> None:
    @contextlib.asynccontextmanager
    async def refuses() -> AsyncIterator[None]:
        raise OSError("port in use")
        yield

    with pytest.raises(OSError, match="port in use"):
        background.enter(refuses)


def test_an_error_on_leaving_is_raised_by_stop_after_the_thread_ended(name: str) -> None:
    @contextlib.asynccontextmanager
    async def breaks_on_exit() -> AsyncIterator[None]:
        yield
        raise RuntimeError("could not close")

    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    background.enter(breaks_on_exit)
    with pytest.raises(RuntimeError, match="could not close"):
        background.stop()
    assert name not in thread_names()


def test_entering_that_takes_too_long_times_out(background: runners.BackgroundLoop) -> None:
    @contextlib.asynccontextmanager
    async def slow() -> AsyncIterator[None]:
        await asyncio.Event().wait()
        yield

    with pytest.raises(TimeoutError, match="not entered within"):
        background.enter(slow, timeout=0.05)


def test_a_thread_that_does_not_end_in_time_is_reported(name: str) -> None:
    blocker = threading.Event()

    async def blocks_the_loop() -> None:
        blocker.wait(WAIT)  # a blocking call: the loop can neither cancel nor stop it

    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    background.submit(blocks_the_loop())
    stop_while_blocked(background, blocker)
    assert name not in thread_names()


def stop_while_blocked(background: runners.BackgroundLoop, blocker: threading.Event) -> None:
    """`stop` gives up on a loop that ``blocker`` holds; then the loop is let go, and its
    thread ends (within the bound)."""
    try:
        with pytest.raises(TimeoutError, match="did not stop within"):
            background.stop(timeout=0.05)
    finally:
        blocker.set()
    thread = next((t for t in threading.enumerate() if t.name == background.name), None)
    if thread is not None:
        thread.join(WAIT)


def test_work_a_blocked_loop_never_started_is_cancelled_when_it_ends(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Work handed over while the loop was blocked, and the shutdown that could not run in
    time, are cancelled once the loop is free, before it closes: dropped unrun, they would
    leave the caller's future pending for ever and warn at garbage collection, blaming
    whatever test runs then."""
    blocker = threading.Event()
    background = runners.BackgroundLoop(name=name, timeout=WAIT).start()
    background.call_soon(lambda: blocker.wait(WAIT))  # blocks the loop outside any task

    async def work() -> None:
        await asyncio.sleep(0)

    handed = background.submit(work())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stop_while_blocked(background, blocker)
        gc.collect()
    assert name not in thread_names()
    assert handed.cancelled()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert "destroyed but it is pending" not in caplog.text
