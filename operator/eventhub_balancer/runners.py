"""An asyncio event loop in a thread of its own, driven from synchronous code.

Synchronous code (the kubernetes client, tests, benchmarks, the demo's step runner) needs
async servers and clients that keep running while it blocks: a whole operator as a second
replica, the local Kubernetes API, the Event Hubs emulator, a fault proxy, async SDK clients.
Starting a thread, making its loop, handing a stop signal across and joining it is easy to
get subtly wrong (a wait without a bound, a loop closed with tasks still on it, an error that
dies with the thread), so it is written once here. Every wait has a bound: a caller that
waits longer than it said gets TimeoutError, never a hang. Errors travel back to the caller:
from a coroutine to `BackgroundLoop.run`, from entering or leaving a held context to
`BackgroundLoop.enter` or `BackgroundLoop.stop`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Final, Self, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The bound of every wait whose caller gives none: ample for work on 127.0.0.1, short
#: enough that a stuck loop fails a test or a benchmark instead of hanging it.
DEFAULT_TIMEOUT: Final = 10.0
#: How long the tasks left on a loop that stopped late get to end once cancelled.
LEFTOVER_SECONDS: Final = 1.0


class BackgroundLoop:
    """An event loop running in a daemon thread: ``start()``/``stop()`` or ``with``.

    Other threads hand it work with `submit` (a future), `run` (the result, within a bound),
    `call` (a plain function on the loop's thread) and `call_soon`; `enter` keeps an async
    context manager (a server) open on the loop until `stop`, which leaves the contexts in
    reverse order, cancels what is still running, and closes the loop.
    """

    def __init__(self, *, name: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.name = name
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        #: The contexts `enter` holds open: what releases each, and its holding task.
        self._held: list[tuple[asyncio.Event, concurrent.futures.Future[None]]] = []

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, for code that must schedule on it directly; prefer the methods below."""
        if self._loop is None:
            raise RuntimeError(f"{self.name}: the loop is not started")
        return self._loop

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopped

    # -- lifecycle

    def start(self, *, timeout: float | None = None) -> Self:
        """Start the thread; returns once its loop runs."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name}: a background loop starts only once")
        bound = self._bound(timeout)
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._main, args=(loop, ready), name=self.name, daemon=True
        )
        self._thread.start()
        if not ready.wait(bound):
            raise TimeoutError(f"{self.name}: the loop did not start within {bound:g} s")
        return self

    def stop(self, *, timeout: float | None = None) -> None:
        """Leave the held contexts, cancel the remaining tasks, end the thread; idempotent.

        Raises TimeoutError if the thread is still alive after ``timeout`` seconds (then it
        is left to die with the process: it is a daemon), else the first error that leaving
        a held context raised.
        """
        thread, loop = self._thread, self._loop
        if thread is None or loop is None or self._stopped:
            return
        self._refuse_own_thread()
        self._stopped = True
        bound = self._bound(timeout)
        deadline = time.monotonic() + bound
        held, self._held = self._held, []
        failure: BaseException | None = None
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(held), loop)
            done, _ = concurrent.futures.wait([shutdown], timeout=bound)
            if done:
                failure = shutdown.exception()
            else:
                shutdown.cancel()
                logger.warning("%s: tasks still running after %g s", self.name, bound)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            raise TimeoutError(f"{self.name}: the thread did not stop within {bound:g} s")
        if failure is not None:
            raise failure

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- work from other threads

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the caller waits on the future with its own bound."""
        if not self.running:
            coro.close()  # never awaited: close it so that it does not warn
            raise RuntimeError(f"{self.name}: the loop is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """``coro``'s result or its exception; TimeoutError (and ``coro`` cancelled) when it
        takes longer than ``timeout`` seconds."""
        self._refuse_own_thread(coro)
        bound = self._bound(timeout)
        future = self.submit(coro)
        done, _ = concurrent.futures.wait([future], timeout=bound)
        if not done:
            future.cancel()
            raise TimeoutError(f"{self.name}: no result within {bound:g} s")
        return future.result()

    def call(self, function: Callable[[], T], *, timeout: float | None = None) -> T:
        """Run ``function`` on the loop's thread, where the state it touches lives."""

        async def invoke() -> T:
            return function()

        return self.run(invoke(), timeout=timeout)

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Schedule ``callback`` on the loop without waiting for it (e.g. to set an event)."""
        if not self.running:
            raise RuntimeError(f"{self.name}: the loop is not running")
        self.loop.call_soon_threadsafe(callback)

    def enter(
        self,
        factory: Callable[[], contextlib.AbstractAsyncContextManager[T]],
        *,
        timeout: float | None = None,
    ) -> T:
        """Enter ``factory()`` on the loop and keep it entered until `stop`; returns what it
        yields. An error on entering is raised here; a timeout cancels the entering."""
        release = asyncio.Event()
        entered: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def hold() -> None:
            try:
                async with factory() as value:
                    entered.set_result(value)
                    await release.wait()
            except BaseException as e:
                if entered.done():
                    raise  # on leaving: stop() reports it
                entered.set_exception(e)

        self._refuse_own_thread()
        bound = self._bound(timeout)
        holding = self.submit(hold())
        done, _ = concurrent.futures.wait([entered], timeout=bound)
        if not done:
            holding.cancel()
            raise TimeoutError(f"{self.name}: not entered within {bound:g} s")
        value = entered.result()  # raises what entering raised
        self._held.append((release, holding))
        return value

    # -- internals

    def _bound(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    def _refuse_own_thread(self, coro: Coroutine[Any, Any, Any] | None = None) -> None:
        if self._thread is not None and threading.current_thread() is self._thread:
            if coro is not None:
                coro.close()
            raise RuntimeError(f"{self.name}: waiting on the loop from its own thread deadlocks")

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
            # A loop that was blocked when `stop` gave up runs `stop`'s callbacks late, and
            # stops before the tasks they made (the shutdown, work handed over meanwhile)
            # take a step: cancel them and let them end, so that no caller's future stays
            # pending and no coroutine is dropped unrun. Bounded: a task that ignores its
            # cancellation is left to die with the loop.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=LEFTOVER_SECONDS))
        finally:
            loop.close()

    @staticmethod
    async def _shutdown(held: list[tuple[asyncio.Event, concurrent.futures.Future[None]]]) -> None:
        failure: BaseException | None = None
        for release, holding in reversed(held):
            release.set()
            try:
                await asyncio.wrap_future(holding)
            except BaseException as e:  # reported once the loop is down
                failure = failure or e
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()
        if failure is not None:
            raise failure
