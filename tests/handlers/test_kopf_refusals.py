"""kopf's stop after a refused watch (or any watch it gave up on), bounded
(`kopfrefusals.run`), on fake time.

A watch of kopf's that is refused until kopf gives up ends kopf's orchestrator with its error,
and kopf then cancels the watches left, once each, and waits for them without a bound. kopf
1.45 can lose that one cancellation (`kopfrefusals` says how), and the operator then hung
until kopf's own SIGKILL 10 minutes on, without saying what it was refused. Here a stand-in
for kopf fails its watchers the way kopf's do (its guard's log line, then the error), and
stops the way the real one did: on its own, or losing the first cancellation.
`tests/handlers/wire/test_refused_watches.py` replays it on the real kopf.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from kopf._cogs.clients import errors as kopf_errors

from eventhub_balancer.handlers import kopfrefusals

pytestmark = pytest.mark.looptime

#: The logger kopf's guard says a failed watcher on (`orchestration` spawns them).
GUARD_LOGGER = logging.getLogger("kopf._core.reactor.orchestration")
#: How long kopf takes to give up on a refused watch here (its retries).
RETRIED = 3.0
#: Longer than any stop this test waits for: kopf's own bound (its SIGKILL) is 600 s.
LIMIT = 300.0


def refusal(resource: str) -> kopf_errors.APIForbiddenError:
    message = (
        f'{resource} is forbidden: User "system:serviceaccount:ehb:ehb" cannot list resource '
        f'"{resource}" in API group "" in the namespace "shop"'
    )
    return kopf_errors.APIForbiddenError(
        {"message": message, "reason": "Forbidden", "code": 403}, status=403, headers={}
    )


def unavailable(resource: str) -> kopf_errors.APIServerError:
    message = "etcdserver: leader changed"
    return kopf_errors.APIServerError(
        {"message": message, "reason": "ServiceUnavailable", "code": 503}, status=503, headers={}
    )


async def watcher(resource: str, fault: Callable[[str], kopf_errors.APIError] = refusal) -> None:
    """A watch of kopf's failed until kopf gives up, ended the way kopf's guard ends it."""
    await asyncio.sleep(RETRIED)
    error = fault(resource)
    try:
        raise error
    except kopf_errors.APIError as e:
        GUARD_LOGGER.exception(f"Watcher for {resource}.v1@shop has failed: {e}")
        raise


class Kopf:
    """kopf's operator as far as a refusal goes: its watchers fail, it reads the first error
    (kopf's ``aiotasks.reraise`` stops at it), and it stops, cleanly or not."""

    def __init__(
        self,
        resources: list[str],
        *,
        loses_a_cancellation: bool,
        fault: Callable[[str], kopf_errors.APIError] = refusal,
    ) -> None:
        self.resources = resources
        self.loses_a_cancellation = loses_a_cancellation
        self.fault = fault
        self.cancellations = 0
        self.watchers: list[asyncio.Task[None]] = []

    async def operator(self) -> None:
        self.watchers = [asyncio.ensure_future(watcher(r, self.fault)) for r in self.resources]
        await asyncio.wait(self.watchers)
        if self.loses_a_cancellation:  # a watch left running, which takes one cancel as its own
            for _ in range(2):
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.cancellations += 1
                    if self.cancellations > 1:
                        raise
        for task in self.watchers:
            task.result()


async def in_own_context(run: Callable[[], Coroutine[Any, Any, None]]) -> BaseException | None:
    """`run` in a task of its own (an operator's `install` sets its context): its error."""

    async def go() -> BaseException | None:
        kopfrefusals.install()
        try:
            await run()
        except Exception as e:
            return e
        return None

    return await asyncio.create_task(go(), context=contextvars.Context())


async def test_a_kopf_that_stops_on_its_own_ends_with_its_refusal_uncancelled() -> None:
    kopf = Kopf(["pods"], loses_a_cancellation=False)
    loop = asyncio.get_running_loop()
    started = loop.time()
    error = await asyncio.wait_for(in_own_context(lambda: kopfrefusals.run(kopf.operator())), LIMIT)
    assert isinstance(error, kopf_errors.APIForbiddenError)
    assert 'cannot list resource "pods"' in str(error)
    assert loop.time() - started == pytest.approx(RETRIED)
    assert kopf.cancellations == 0


async def test_a_kopf_that_loses_a_cancellation_is_cancelled_again_and_says_its_refusal() -> None:
    """Awaited as it was before `run`, this stand-in never ends: the test's own bound fails."""
    kopf = Kopf(["eventhubconsumers"], loses_a_cancellation=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    error = await asyncio.wait_for(in_own_context(lambda: kopfrefusals.run(kopf.operator())), LIMIT)
    stopped = loop.time() - started
    assert isinstance(error, kopf_errors.APIForbiddenError)
    assert "eventhubconsumers" in str(error)
    assert kopf.cancellations == 2
    # kopf's grace, then one cancellation lost and one taken, an interval apart.
    grace = kopfrefusals.STOP_GRACE_SECONDS
    assert stopped == pytest.approx(RETRIED + grace + kopfrefusals.CANCEL_INTERVAL_SECONDS)


async def test_a_kopf_whose_watch_the_api_server_failed_is_bounded_the_same_way() -> None:
    """A watch answered 5xx past kopf's retries fails the same way, and its stop too."""
    kopf = Kopf(["pods"], loses_a_cancellation=True, fault=unavailable)
    loop = asyncio.get_running_loop()
    started = loop.time()
    error = await asyncio.wait_for(in_own_context(lambda: kopfrefusals.run(kopf.operator())), LIMIT)
    stopped = loop.time() - started
    assert isinstance(error, kopf_errors.APIServerError)
    assert kopf.cancellations == 2
    grace = kopfrefusals.STOP_GRACE_SECONDS
    assert stopped == pytest.approx(RETRIED + grace + kopfrefusals.CANCEL_INTERVAL_SECONDS)


async def test_a_kopf_stopped_from_outside_is_cancelled_as_before() -> None:
    stopped = asyncio.Event()

    async def operator() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    async def operate() -> None:
        kopfrefusals.install()
        await kopfrefusals.run(operator())

    task = asyncio.create_task(operate(), context=contextvars.Context())
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, LIMIT)
    assert stopped.is_set()


async def test_every_refusal_is_read_so_none_is_printed_as_never_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kopf reads the first of its failed tasks; the others' errors went unread, and asyncio
    printed each with its traceback as the process exited ("never retrieved")."""
    kopf = Kopf(["eventhubconsumers", "pods", "configmaps"], loses_a_cancellation=False)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        error = await asyncio.wait_for(
            in_own_context(lambda: kopfrefusals.run(kopf.operator())), LIMIT
        )
        assert isinstance(error, kopf_errors.APIForbiddenError)
        assert all(task.done() for task in kopf.watchers)
        kopf.watchers.clear()
        del error
        gc.collect()
    unread = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert unread == []


async def test_kopfs_failed_stream_callback_is_left_out_only_after_a_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kopf's ``request_cancel_callback`` asserts that it runs in a task; when it runs during
    the stop that follows a refusal, asyncio printed its traceback."""

    def request_cancel_callback() -> None:
        raise AssertionError

    async def operator(*, refused: bool) -> None:
        if refused:
            # kopf stops; its error is read from the task, as kopf's own would be.
            with contextlib.suppress(kopf_errors.APIForbiddenError):
                await watcher("pods")
        asyncio.get_running_loop().call_soon(request_cancel_callback)
        await asyncio.sleep(0.1)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        await asyncio.wait_for(
            in_own_context(lambda: kopfrefusals.run(operator(refused=False))), LIMIT
        )
        said_unrefused = [r for r in caplog.records if "request_cancel_callback" in r.getMessage()]
        caplog.clear()
        await asyncio.wait_for(
            in_own_context(lambda: kopfrefusals.run(operator(refused=True))), LIMIT
        )
        said_refused = [r for r in caplog.records if "request_cancel_callback" in r.getMessage()]
    assert len(said_unrefused) == 1  # any other time, asyncio says it as it would
    assert said_refused == []


def not_served(resource: str) -> kopf_errors.APINotFoundError:
    """kube-apiserver's answer to a watch of a resource whose CRD was deleted: plain text."""
    return kopf_errors.APINotFoundError("404 page not found", status=404, headers={})


async def test_a_watch_of_a_resource_no_longer_served_ends_in_one_line_without_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kopf's peering CRD deleted while the operator ran: kopf's two error lines, each with its
    traceback, then a third traceback out of ``ehb``; now kopf's are left out, and `gone` is
    the line ``ehb`` says."""
    kopf = Kopf(["clusterkopfpeerings.kopf.dev"], loses_a_cancellation=False, fault=not_served)
    with caplog.at_level(logging.DEBUG):
        error = await asyncio.wait_for(
            in_own_context(lambda: kopfrefusals.run(kopf.operator())), LIMIT
        )
    assert isinstance(error, kopf_errors.APINotFoundError)
    said = [r for r in caplog.records if r.levelno >= logging.INFO and r.name.startswith("kopf")]
    assert said == []
    gone = kopfrefusals.gone(error)
    assert str(gone).startswith(
        "the Kubernetes API stopped serving a resource the operator watches "
        "(404: 404 page not found), as when its CRD is deleted while the operator runs: apply "
    )
    assert "manifests/peering/kopf-peering-crds.yaml" in str(gone)
