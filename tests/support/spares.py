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


class Spares(Generic[K, T]):
    """Started ``T`` by kind ``K``: ``start(kind)`` makes one started, ``stop(thing)`` ends it.

    ``timeout``: the longest a take waits for its own start (a start queued behind another's
    waits for both).
    """

    def __init__(
        self, start: Callable[[K], T], stop: Callable[[T], None], *, timeout: float
    ) -> None:
        self._start = start
        self._stop = stop
        self._timeout = timeout
        self._lock = threading.Lock()
        self._ahead: dict[K, concurrent.futures.Future[T]] = {}
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
            if mine is None or (mine.done() and mine.exception() is not None):
                # None ahead, or its start failed a while ago: this take starts its own (and
                # fails with its own error, if it fails again).
                mine = self._starter.submit(self._start, kind)
            self._ahead[kind] = self._starter.submit(self._start, kind)
        try:
            return mine.result(timeout=2 * self._timeout)
        except concurrent.futures.TimeoutError:
            # Stopped once it is up, should it ever come: nobody will take it.
            mine.add_done_callback(self._stop_when_done)
            raise TimeoutError(f"no {kind!r} started within {2 * self._timeout:g} s") from None

    def close(self) -> None:
        """Stop the spares never taken (a start under way is waited for, then stopped)."""
        with self._lock:
            self._closed = True
            ahead, self._ahead = list(self._ahead.values()), {}
        for future in ahead:
            if not future.cancel():
                self._stop_when_done(future)
        self._starter.shutdown(wait=True)

    def _stop_when_done(self, future: concurrent.futures.Future[T]) -> None:
        with contextlib.suppress(Exception):
            self._stop(future.result(timeout=2 * self._timeout))
