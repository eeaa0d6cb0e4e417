"""Things slow to start, started one ahead: each test module still gets one of its own.

A real control plane costs about 6 s of a core to start (etcd, then kube-apiserver's
bootstrap), and 7-9 s of waiting on a machine that runs the suite beside it. Some 30 test
modules start one each, and each waited for it before its first test. `Spares` starts the next
one of a kind while a module runs, so the next module of that kind takes it ready: the start's
CPU falls in the time the tests spend waiting on their components, not on a module's path.

- The first `Spares.take` of a kind starts one and waits for it (a kind nobody takes is never
  started); every take then starts the next of its kind ahead.
- Nothing is shared: a spare goes to one taker, who stops it; `Spares.close` stops those never
  taken.
- A spare nobody takes within `IDLE_S` of its start is stopped: an idle control plane costs
  about 4% of a core, and in a suite bound by CPU the last one of each kind on a worker
  otherwise idled until the worker ended (20 minutes and more for the Helm modules' kind). The
  next take of its kind then starts its own and waits for it, as the first does.
- All starts run on one thread of the pool's own, which lives until `close`: the control
  plane's binaries get SIGTERM when the thread that started them ends
  (``eventhub_balancer_devstack.parentdeaths``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

#: How long a started spare waits for its taker. Idle, a control plane spends about 2.4 s of
#: CPU a minute; its start, 5.8 s: kept longer, a spare costs more than starting anew. The
#: suite's real-plane modules mostly follow each other within a minute or two.
IDLE_S = 120.0

#: Runs an action after a delay, in a thread of its own; returns what cancels it.
Timer = Callable[[float, Callable[[], None]], Callable[[], None]]


def thread_timer(delay: float, action: Callable[[], None]) -> Callable[[], None]:
    """A `Timer` on `threading.Timer` (a daemon: an armed one never holds the process)."""
    timer = threading.Timer(delay, action)
    timer.daemon = True
    timer.start()
    return timer.cancel


class Spares(Generic[K, T]):
    """Started ``T`` by kind ``K``: ``start(kind)`` makes one started, ``stop(thing)`` ends it.

    ``timeout``: the longest a take waits for its own start (a start queued behind another's
    waits for both). ``idle``: how long a started spare waits for a taker before ``timer``
    has it stopped.
    """

    def __init__(
        self,
        start: Callable[[K], T],
        stop: Callable[[T], None],
        *,
        timeout: float,
        idle: float = IDLE_S,
        timer: Timer = thread_timer,
    ) -> None:
        self._start = start
        self._stop = stop
        #: A take waits for its own start, and maybe for one queued before it.
        self._wait = 2 * timeout
        self._idle = idle
        self._timer = timer
        self._lock = threading.Lock()
        self._ahead: dict[K, concurrent.futures.Future[T]] = {}
        #: What cancels the idle timer of each spare started and not taken yet.
        self._idling: dict[concurrent.futures.Future[T], Callable[[], None]] = {}
        self._closed = False
        # One thread: the starts run one at a time, and the thread outlives what it started.
        self._starter = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="spares"
        )

    def take(self, kind: K) -> T:
        """One started ``kind``, the caller's to stop; the next is started ahead."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the spares are closed")
            mine = self._ahead.pop(kind, None)
            if mine is not None:
                self._idling.pop(mine, lambda: None)()
            if mine is None or (mine.done() and mine.exception() is not None):
                # None ahead (or it idled and was stopped), or its start failed a while ago:
                # this take starts its own (and fails with its own error, if it fails again).
                mine = self._starter.submit(self._start, kind)
            ahead = self._ahead[kind] = self._starter.submit(self._start, kind)
        # Outside the lock: a start already done calls back at once, in this thread.
        ahead.add_done_callback(lambda started: self._arm(kind, started))
        try:
            return mine.result(timeout=self._wait)
        except concurrent.futures.TimeoutError:
            # Stopped once it is up, should it ever come: nobody will take it.
            mine.add_done_callback(self._stop_when_done)
            raise TimeoutError(f"no {kind!r} started within {self._wait:g} s") from None

    def close(self) -> None:
        """Stop the spares never taken (a start under way is waited for, then stopped)."""
        with self._lock:
            self._closed = True
            ahead, self._ahead = list(self._ahead.values()), {}
            idling, self._idling = list(self._idling.values()), {}
        for cancel in idling:
            cancel()
        for future in ahead:
            if not future.cancel():
                self._stop_when_done(future)
        self._starter.shutdown(wait=True)

    def _arm(self, kind: K, started: concurrent.futures.Future[T]) -> None:
        """A spare is up: stop it if nobody takes it within ``idle``."""
        if started.cancelled() or started.exception() is not None:
            return
        with self._lock:
            if self._ahead.get(kind) is started:
                self._idling[started] = self._timer(self._idle, lambda: self._reap(kind, started))

    def _reap(self, kind: K, started: concurrent.futures.Future[T]) -> None:
        with self._lock:
            if self._ahead.get(kind) is not started:
                return  # taken meanwhile, or closed: its taker or `close` stops it
            del self._ahead[kind]
            self._idling.pop(started, None)
        self._stop_when_done(started)

    def _stop_when_done(self, future: concurrent.futures.Future[T]) -> None:
        with contextlib.suppress(Exception):
            self._stop(future.result(timeout=self._wait))
