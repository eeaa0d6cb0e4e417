"""Loading the user's handler and calling it on a micro-batch.

A handler is ``module:function``. Plain mode calls ``function(events, context)`` with a
sequence of :class:`contexts.ReceivedEvent` (Spark mode gathers the batches into triggers:
`triggers`). Sync handlers run in a worker thread of the pod's handler pool (its size is
``--handler-concurrency``: calls beyond it wait for a thread) so that the receive loops keep
running; async handlers are awaited.
A batch counts as done only when the handler returned: anything it raises is the caller's
to retry, and no checkpoint passes it. What it returns is awaited when awaitable (a sync
callable's coroutine, or an async handler's ``return write(events)``), else ignored, with a
warning once for a value that is not None: ``return False`` does not fail a batch.

A thread cannot be stopped, so cancelling the call of a sync handler does not end the call
before its thread ends (`run_in_thread`): whoever waits for the call knows the handler is
still running, and a release is not acknowledged while it does.

Whatever the handler raises is its batch's failure, `BaseException` subclasses included: a
``SystemExit`` left to itself stops the pod's event loop (asyncio re-raises it out of the
loop, from a thread's call too), and another one ends the partition's worker past the failure
policy. They reach the caller as `HandlerRaised`. A handler that returns a generator (a
``yield`` in its body) has run nothing: that is a failure too, not a batch done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import importlib
import inspect
import logging
import reprlib
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, cast

from eventhub_balancer import errors
from eventhub_balancer.consumer import contexts

T = TypeVar("T")

logger = logging.getLogger(__name__)


#: Handler calls that may run at once in threads, unless ``--handler-concurrency`` says.
DEFAULT_HANDLER_CONCURRENCY = 32

#: A release deadline the loop saw this much late or more was passed while the process was
#: paused (CPU throttling, a frozen container): the call, paused with it, gets this long to
#: end before it is abandoned, and before the process exits for it.
RESUMED_SETTLE_S = 0.5

#: In a processor's call from a partition's worker (`attempts.BatchAttempts`), that partition's
#: release, set once it started (None outside a worker). A processor that holds batches back
#: before their handler runs (Spark mode's trigger queue, `triggers`) withdraws a batch whose
#: release started; a handler that already runs is never interrupted by it. A context variable,
#: not an argument: it reaches the processor through any wrapper (`tracing`) unchanged.
release_started: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "release_started", default=None
)

#: In a processor's call from a partition's worker, told True when the handler waits for a
#: thread of the pool (every thread busy) and False once it runs: a call's running time, the
#: one the stuck limit is about, starts when its handler does (None outside a worker).
handler_waits: contextvars.ContextVar[Callable[[bool], None] | None] = contextvars.ContextVar(
    "handler_waits", default=None
)


class HandlerRaised(Exception):
    """The handler raised ``error``, a `BaseException` that is not an `Exception`
    (``SystemExit``, ``KeyboardInterrupt``, a library's own, or a ``CancelledError`` that
    nothing asked for): a failed attempt of its batch like any other error."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        super().__init__(f"{type(error).__name__}: {error}")


def handler_threads(concurrency: int = DEFAULT_HANDLER_CONCURRENCY) -> concurrent.futures.Executor:
    """The pod's pool for sync handler calls: its own, so that its size is a setting and not
    the event loop's default pool (``min(32, cpus + 4)``, shared with everything else)."""
    if concurrency < 1:
        raise errors.InvalidInput("--handler-concurrency", f"{concurrency} is less than 1")
    return concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="ehb-handler")


async def run_in_thread(
    function: Callable[..., T],
    *args: Any,
    executor: concurrent.futures.Executor | None = None,
    withdraw_on: asyncio.Event | None = None,
    waits: Callable[[bool], None] | None = None,
) -> T:
    """``function(*args)`` in a thread of ``executor`` (None: the loop's default pool), with
    the caller's context variables; a cancellation takes effect when it returns.

    ``asyncio.to_thread`` ends its awaitable at once on cancellation while the thread runs on
    unseen; here the call ends (cancelled) only once the thread is done, so that the caller
    can tell a handler that still runs from one that stopped. A call still waiting for a
    thread (every thread of the pool busy) has not started: it is withdrawn at once, raising
    CancelledError without ever running, when it is cancelled or when ``withdraw_on`` is set.
    ``waits`` is told True before the call waits for a thread and False once it runs.
    """
    loop = asyncio.get_running_loop()
    claim = _Claim(
        None if waits is None else functools.partial(loop.call_soon_threadsafe, waits, False)
    )
    call = functools.partial(contextvars.copy_context().run, claim.run, function, *args)
    if waits is not None:
        waits(True)
    future = loop.run_in_executor(executor, call)
    withdraw = None if withdraw_on is None else asyncio.ensure_future(withdraw_on.wait())
    cancelled = False
    try:
        while not future.done():
            waiting: set[asyncio.Future[Any]] = {future}
            if withdraw is not None:
                waiting.add(withdraw)
            try:
                # asyncio.wait never cancels what it waits for: the thread's future survives
                # this call's cancellation.
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                cancelled = True  # the thread runs on: so does this call
            released = withdraw is not None and withdraw.done()
            if (cancelled or released) and claim.withdraw():
                raise asyncio.CancelledError()  # it never started, and now never will
            if released:
                withdraw = None  # it runs: the release waits for it like anyone else
    finally:
        if withdraw is not None:
            withdraw.cancel()
    if cancelled:
        raise asyncio.CancelledError()
    return cast(T, future.result())  # withdrawn calls raised above


class _Claim:
    """Whether a call handed to a pool runs: taken by its thread when it starts, or by the
    loop while it still waits for a thread (then the thread skips it)."""

    def __init__(self, on_start: Callable[[], object] | None = None) -> None:
        self._lock = threading.Lock()
        self._state: Literal["waiting", "running", "withdrawn"] = "waiting"
        #: Called in the thread as the call starts.
        self._on_start = on_start

    def withdraw(self) -> bool:
        """Withdraw the call unless its thread started it (True: it never will)."""
        with self._lock:
            if self._state == "waiting":
                self._state = "withdrawn"
            return self._state == "withdrawn"

    def run(self, function: Callable[..., T], *args: Any) -> T | None:
        with self._lock:
            if self._state == "withdrawn":
                return None
            self._state = "running"
        if self._on_start is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody to tell
                self._on_start()
        return _contained(function, *args)


def _contained(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` with a `BaseException` that is not an `Exception` turned into
    `HandlerRaised` in the thread: carried over to the loop as it is, a ``SystemExit``
    would stop the loop, and a ``CancelledError`` would read as the call's cancellation."""
    try:
        return function(*args)
    except Exception:
        raise
    except BaseException as e:
        raise HandlerRaised(e) from e


async def abandon(
    call: asyncio.Future[None],
    *,
    deadline: float,
    grace: float,
    partition: str,
    on_hung: Callable[[str], None] | None,
) -> bool:
    """Cancel a handler ``call`` a release gave up on, and wait until it has really ended;
    False when it ended by itself first (not abandoned).

    An async handler that honours cancellation ends at once. A sync handler's thread cannot
    be stopped, and its processor's call ends only when the thread does (`run_in_thread`):
    until then the release is not acknowledged, so the next owner never overlaps it. Still
    running ``grace`` seconds past the release ``deadline`` (the loop's clock), it gets
    ``on_hung`` called (the process exits). A deadline passed while the process was paused
    (seen `RESUMED_SETTLE_S` late or more) gives the call that long first, and the exit
    never comes sooner than that after the pause: both deadlines used to fire as soon as
    the loop ran again, ahead of the result of a call that ended a moment later.
    """
    now = asyncio.get_running_loop().time()
    if now - deadline >= RESUMED_SETTLE_S:
        await asyncio.wait({call}, timeout=RESUMED_SETTLE_S)
        if call.done() and not call.cancelled():
            return False
    call.cancel()
    exit_at = max(deadline + grace, now + RESUMED_SETTLE_S)
    done, _ = await asyncio.wait(
        {call}, timeout=max(0.0, exit_at - asyncio.get_running_loop().time())
    )
    if not done:
        late = asyncio.get_running_loop().time() - deadline
        reason = (
            f"partition {partition}: the handler still runs {late:.3g} s past its release "
            "deadline and cannot be cancelled"
        )
        logger.critical("%s: exiting so that the next owner can take over", reason)
        if on_hung is not None:
            on_hung(reason)
        await asyncio.wait({call})  # the process is on its way out
    if not call.cancelled() and call.exception() is not None:
        logger.debug("partition %s: the abandoned call raised", partition)
    return True


async def wait_unless_abandoned(
    call: asyncio.Future[None],
    *,
    stop: asyncio.Event,
    deadline: Callable[[], float | None],
    grace: float,
    partition: str,
    on_hung: Callable[[str], None] | None,
) -> bool | None:
    """Wait for the handler ``call``; past the release ``deadline`` (None: no release yet)
    cancel it (False, `abandon`). None: the processor withdrew the batch, unprocessed, once
    the release (``stop``) started.

    While no release is asked for, the handler may run as long as it needs (past
    ``stuck_seconds`` the partition is reported stuck; the pod stays Ready).
    """
    while not call.done():
        at = deadline()
        if at is not None:
            try:
                async with asyncio.timeout_at(at):
                    await asyncio.wait({call})
            except TimeoutError:
                if call.done() and not call.cancelled():
                    # It ended in the loop turn of the deadline, before the timeout
                    # could cancel it: it finished (or failed) and was not abandoned.
                    break
                if await abandon(
                    call, deadline=at, grace=grace, partition=partition, on_hung=on_hung
                ):
                    return False
        else:
            stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({call, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
    if call.cancelled():
        if stop.is_set():
            return None
        # Nothing here cancelled it (a release's deadline returns above): the processor
        # raised CancelledError itself. Left to propagate, it ended the worker as if the
        # runtime had cancelled it, and the worker started again at once, in a loop.
        raise HandlerRaised(asyncio.CancelledError("the handler raised it"))
    error = call.exception()
    if error is None:
        return True
    if isinstance(error, Exception):
        raise error
    raise HandlerRaised(error) from error


class BatchProcessor(Protocol):
    """Runs the user's code on one batch; returns when the batch is done."""

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None: ...


def load_handler(reference: str, *, search_path: Sequence[str] = ()) -> Callable[..., Any]:
    """Import ``package.module:function``; every mistake says what to change."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise errors.InvalidInput(
            "--handler", f"{reference!r} is not module:function (e.g. mypkg.pipeline:process)"
        )
    for entry in search_path:
        if entry and entry not in sys.path:
            sys.path.insert(0, str(Path(entry).resolve()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        # A --handler-path that is no folder here (a mount missing, a typo) is the likelier
        # cause: it was taken without a word.
        absent = [entry for entry in search_path if entry and not Path(entry).is_dir()]
        hint = (
            f"; --handler-path {', '.join(absent)}: no such folder here"
            if absent
            else " (is the package installed, or on PYTHONPATH / --handler-path?)"
        )
        raise errors.InvalidInput(
            "--handler", f"cannot import module {module_name!r}: {e}{hint}"
        ) from e
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise errors.InvalidInput(
                "--handler", f"module {module_name!r} has no attribute {attribute!r}"
            ) from None
    if not callable(target):
        raise errors.InvalidInput("--handler", f"{reference} is not callable")
    return target  # type: ignore[no-any-return]


class PlainProcessor:
    """``process(events, context)``, awaited or run in a thread of ``executor``."""

    def __init__(
        self, function: Callable[..., Any], *, executor: concurrent.futures.Executor | None = None
    ) -> None:
        self.function = function
        self.executor = executor
        self.is_async = inspect.iscoroutinefunction(function)
        #: A returned value is logged once per processor: a handler returns the same kind of
        #: value on every batch, and a line per batch would flood the log.
        self._said_ignored = False

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        if self.is_async:
            result = self.function(events, context)
        else:
            # A batch that still waits for a thread when its partition's release starts is
            # withdrawn: nothing of it ran, and the next owner starts with it.
            result = await run_in_thread(
                self.function,
                events,
                context,
                executor=self.executor,
                withdraw_on=release_started.get(),
                waits=handler_waits.get(),
            )
        if inspect.isgenerator(result) or inspect.isasyncgen(result):
            raise TypeError(
                f"the handler returned a {type(result).__name__} and ran nothing: a handler "
                "does its work when called (remove the yield)"
            )
        # A coroutine function's call, or a sync callable that returned one; then what an
        # async handler returned with its ``await`` forgotten (``return write(events)``):
        # dropped, that coroutine never ran, and its batch was checkpointed all the same.
        for _ in range(2):
            if not inspect.isawaitable(result):
                break
            result = await _on_the_loop(result)
        if result is not None and not self._said_ignored:
            self._said_ignored = True
            logger.warning(
                "the handler returned %s, which the runtime ignores: a batch is done when its "
                "handler returns, whatever it returns; raise to fail it (said once)",
                reprlib.repr(result),
            )


async def _on_the_loop(awaitable: Awaitable[T]) -> T:
    """``await awaitable``, with a `BaseException` that is not an `Exception` as
    `HandlerRaised`: raised on the loop, a SystemExit or KeyboardInterrupt would stop it."""
    try:
        return await awaitable
    except (Exception, asyncio.CancelledError):
        raise
    except BaseException as e:
        raise HandlerRaised(e) from e


def wrap(function: Callable[..., Awaitable[None] | None]) -> BatchProcessor:
    """A plain processor from a Python function (the Python API's entry)."""
    return PlainProcessor(function)


def traced(processor: BatchProcessor) -> BatchProcessor:
    """``processor`` inside a span per batch when ``ehb consume`` set up tracing (the ``otel``
    extra and OTEL_* environment: `tracing`), else ``processor`` itself."""
    from eventhub_balancer.consumer import tracing

    return tracing.instrument(processor)
