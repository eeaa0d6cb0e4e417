"""The pool that starts control planes one ahead (tests/support/spares.py), on fake things."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest

from tests.support.spares import Spares

WAIT_S = 10.0


class Things:
    """A fake start and stop: each start makes a new numbered thing of its kind."""

    def __init__(self, failures: int = 0) -> None:
        self.started: list[tuple[str, int]] = []
        self.stopped: list[tuple[str, int]] = []
        self.threads: set[threading.Thread] = set()
        self.failures = failures
        self.attempts = 0
        self._numbers = itertools.count()
        self._changed = threading.Condition()

    def start(self, kind: str) -> tuple[str, int]:
        with self._changed:
            self.threads.add(threading.current_thread())
            self.attempts += 1
            self._changed.notify_all()
            if self.failures:
                self.failures -= 1
                raise OSError("the port was taken")
            thing = (kind, next(self._numbers))
            self.started.append(thing)
            self._changed.notify_all()
            return thing

    def stop(self, thing: tuple[str, int]) -> None:
        self.stopped.append(thing)

    def wait_started(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.started) >= count, timeout=WAIT_S)

    def wait_attempts(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.attempts >= count, timeout=WAIT_S)


def test_each_take_gets_a_thing_of_its_own_and_the_next_is_started_ahead() -> None:
    things = Things()
    pool = Spares(things.start, things.stop, timeout=WAIT_S)
    first = pool.take("crds")
    things.wait_started(2)  # the next, ahead, before anyone asked for it
    assert things.started == [("crds", 0), ("crds", 1)]
    second = pool.take("crds")
    assert (first, second) == (("crds", 0), ("crds", 1))
    things.wait_started(3)
    pool.close()
    assert things.stopped == [("crds", 2)]  # only the one nobody took


def test_kinds_are_started_apart_and_only_once_asked_for() -> None:
    things = Things()
    pool = Spares(things.start, things.stop, timeout=WAIT_S)
    assert pool.take("crds") == ("crds", 0)
    things.wait_started(2)
    assert [kind for kind, _ in things.started] == ["crds", "crds"]
    assert pool.take("bare")[0] == "bare"
    assert pool.take("crds") == ("crds", 1)
    things.wait_started(5)  # and one ahead of each kind
    pool.close()
    assert sorted(kind for kind, _ in things.stopped) == ["bare", "crds"]


def test_a_spare_whose_start_failed_is_started_again_by_the_take_that_finds_it() -> None:
    things = Things()
    pool = Spares(things.start, things.stop, timeout=WAIT_S)
    pool.take("crds")
    things.wait_started(2)
    things.failures = 1
    assert pool.take("crds") == ("crds", 1)  # the spare ahead, started before the failure
    things.wait_attempts(3)  # the spare after it: its start failed
    assert pool.take("crds") == ("crds", 2)  # started again for this take
    pool.close()
    assert things.stopped == [("crds", 3)]  # the next spare; the failed start is nothing to stop


def test_a_take_whose_own_start_fails_says_why_and_the_next_take_is_served() -> None:
    things = Things(failures=1)
    pool = Spares(things.start, things.stop, timeout=WAIT_S)
    with pytest.raises(OSError, match="the port was taken"):
        pool.take("crds")
    assert pool.take("crds") == ("crds", 0)  # the spare started ahead of the failed take
    pool.close()


def test_every_start_runs_on_one_thread_that_lives_until_close() -> None:
    # The control plane's binaries get SIGTERM when the thread that started them ends.
    things = Things()
    pool = Spares(things.start, things.stop, timeout=WAIT_S)
    pool.take("crds")
    pool.take("bare")
    things.wait_started(4)
    (thread,) = things.threads
    assert thread is not threading.current_thread()
    assert thread.is_alive()
    pool.close()
    thread.join(timeout=WAIT_S)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        pool.take("crds")


class Timers:
    """A fake `Timer`: armed actions run only when the test fires them."""

    def __init__(self) -> None:
        self.armed: list[tuple[float, Callable[[], None], list[bool]]] = []
        self._changed = threading.Condition()

    def __call__(self, delay: float, action: Callable[[], None]) -> Callable[[], None]:
        cancelled = [False]
        with self._changed:
            self.armed.append((delay, action, cancelled))
            self._changed.notify_all()
        return lambda: cancelled.__setitem__(0, True)

    def wait_armed(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.armed) >= count, timeout=WAIT_S)

    def fire(self, index: int) -> None:
        """Run an armed action, cancelled or not (a timer may fire as it is cancelled)."""
        self.armed[index][1]()


def test_a_spare_nobody_takes_within_the_idle_time_is_stopped() -> None:
    things, timers = Things(), Timers()
    pool = Spares(things.start, things.stop, timeout=WAIT_S, idle=120.0, timer=timers)
    assert pool.take("crds") == ("crds", 0)
    timers.wait_armed(1)  # armed once the spare is up
    assert timers.armed[0][0] == 120.0
    timers.fire(0)
    assert things.stopped == [("crds", 1)]
    # The next take finds none ahead: it starts its own, and one ahead again.
    assert pool.take("crds") == ("crds", 2)
    things.wait_started(4)
    pool.close()
    assert things.stopped == [("crds", 1), ("crds", 3)]


def test_a_spare_taken_in_time_is_not_stopped_by_its_timer() -> None:
    things, timers = Things(), Timers()
    pool = Spares(things.start, things.stop, timeout=WAIT_S, idle=120.0, timer=timers)
    pool.take("crds")
    timers.wait_armed(1)
    assert pool.take("crds") == ("crds", 1)
    assert timers.armed[0][2] == [True]  # its timer cancelled by the take
    timers.fire(0)  # and should it fire all the same, the taker's spare is left alone
    assert things.stopped == []
    timers.wait_armed(2)  # the next spare's own timer
    pool.close()
    assert timers.armed[1][2] == [True]
    assert things.stopped == [("crds", 2)]
