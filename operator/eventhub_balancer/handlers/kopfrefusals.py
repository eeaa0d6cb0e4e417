"""A watch the operator's identity may not make (403), said in one line that names the right.

kopf retries a refused request as it retries an outage (a 403 may come and go while the API
servers are upgraded), through its error backoffs, about a minute: RBAC applied together with
the operator, or a little after it, is met in time. Then it gives up on the watch, and the
operator stops. It said so in kopf's escalation line and two tracebacks of its tasks, and the
error escaped ``ehb`` in a third: 154 lines for one refused watch, replayed on the local API
server, 290 with the pods refused too.

`install` leaves those out of the log (the escalation of a refused watch, and the failure of
kopf's tasks that it ended), and `refused` turns the error kopf ends with into one
`errors.Forbidden`: who was refused what, where, and the RBAC to apply, which ``ehb`` prints
in its one ``ehb: error:`` line before it exits 1. Kubernetes restarts the pod (at a pace
that doubles up to 5 minutes): each start retries for that minute again, and says one warning
and that one line. `tests/handlers/wire/test_refused_watches.py` replays it.

A watch whose resource is no longer served (404: a CRD deleted while the operator runs, kopf's
peering CRD most often) ends kopf at once, and escaped ``ehb`` as a traceback after kopf's
two error lines. Its tracebacks are left out the same way, and `gone` says it in one line.

kopf's stop after a refused watch could also hang for good. The watch that failed ends kopf's
orchestrator with its error, so the orchestrator does not stop its other watches: kopf's
last step cancels them, with each watch's pause waiter, once, and waits for them without a
bound. kopf 1.45's ``api.stream`` takes a cancellation that arrives together with its pause
waiter's for that waiter's, and returns: a watch that was opening its request at that moment
(about half the time, by the order of a set) opens its listing again, through credentials
that kopf's cleanup has closed, and waits for them for ever, until kopf's own SIGKILL 10
minutes on. Replayed on the local API server with the ConfigMaps' watch held: four of eight
stops hung. `run` bounds it: once a task of kopf's fails, kopf has `STOP_GRACE_SECONDS` to
stop on its own, and is then cancelled once a second until it has; the refusal is said the
same way. Any other task of kopf's that fails (a watch kopf gave up on for an error that
`kopfwatches` does not restart it after) has kopf's stop bounded the same way.

The same race fails a callback of kopf's (``request_cancel_callback`` asserts that it runs in
a task, which a callback never does) and asyncio prints its traceback: during that stop it is
left out. The errors of kopf's tasks that failed, of which kopf reads only the first, are
read too, so that none is printed as "never retrieved" at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
from collections.abc import Coroutine
from typing import Any

from kopf._cogs.clients import errors as kopf_errors

from eventhub_balancer import errors
from eventhub_balancer.handlers import kopfretrylogs

#: kube-apiserver's RBAC refusal: ``User "U" cannot VERB resource "R" in API group "G"``,
#: then `` in the namespace "N"`` or `` at the cluster scope``.
_REFUSAL = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]*)"'
    r'(?: in API group "(?P<group>[^"]*)")?'
    r'(?: in the namespace "(?P<namespace>[^"]*)")?'
)
#: A ServiceAccount's user name, as the API server writes it.
_SERVICE_ACCOUNT = re.compile(r"system:serviceaccount:(?P<namespace>[^:]+):(?P<name>[^:]+)")
#: kopf's logger of its watches' requests (another request's, a patch's, is the object's).
WATCHING = "kopf._cogs.clients.watching"
#: What kopf logs when it gives up on a request, and when one of its tasks ends in an error.
ESCALATION = "failed; escalating:"
TASK_FAILED = " has failed: "
#: What to apply, as the install pages name it.
ADVICE = (
    "apply the chart's RBAC (rbac.create=true, the default: the ClusterRole and "
    "ClusterRoleBinding named after the release, and with watchNamespaces a Role and "
    "RoleBinding in each of them; docs/install.md), or manifests/install/20-rbac.yaml, and "
    "bind it to this identity"
)


#: How long kopf may take to stop on its own once a task of its failed (a watch it gave up
#: on): it waits 5 s for the tasks it did not stop itself before it cancels them.
STOP_GRACE_SECONDS = 10.0
#: Then it is cancelled once every `CANCEL_INTERVAL_SECONDS`, at most `CANCELS` times (kopf
#: can lose one cancellation; a second reaches the wait it went on to).
CANCEL_INTERVAL_SECONDS = 1.0
CANCELS = 10

logger = logging.getLogger(__name__)


class _Refusal:
    """Whether kopf gave up on a watch of this operator's as refused, and kopf's tasks that
    failed (a refusal, or any other error: kopf is stopping)."""

    def __init__(self) -> None:
        self.given_up = False
        self.stopping = asyncio.Event()
        self.failed: list[asyncio.Task[Any]] = []

    def give_up(self) -> None:
        self.given_up = True
        self.stopping.set()

    def task_failed(self) -> None:
        """Called in the task of kopf's that is failing (its guard says so)."""
        with contextlib.suppress(RuntimeError):  # no loop running: nothing to read later
            task = asyncio.current_task()
            if task is not None:
                self.failed.append(task)
        self.stopping.set()

    def error(self) -> Exception | None:
        """The error kopf's failed tasks ended in, a refusal first; reading them all marks
        them retrieved."""
        errors = [task.exception() for task in self.failed if task.done() and not task.cancelled()]
        refusals = [e for e in errors if isinstance(e, kopf_errors.APIForbiddenError)]
        others = [e for e in errors if isinstance(e, Exception)]
        return (refusals or others or [None])[0]


#: The operator's `_Refusal`, set by `install` in the task that starts kopf, whose tasks
#: inherit it (as `kopfretrylogs.LOG`): two operators in one process keep their own.
REFUSAL: contextvars.ContextVar[_Refusal] = contextvars.ContextVar("ehb_kopf_refusal")


class _SaidOnExit(logging.Filter):
    """Leaves out kopf's records of a refused watch, which `refused` says when kopf stops, and
    those of kopf's stop that follows (its other requests cut short, retried once more)."""

    def filter(self, record: logging.LogRecord) -> bool:
        refusal = REFUSAL.get(None)
        if refusal is None:  # not in an operator that installed it
            return True
        error = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        task_failed = isinstance(error, Exception) and TASK_FAILED in message
        if task_failed:  # said by kopf's guard in the task that ends with the error
            refusal.task_failed()
        # A watch refused, or of a resource no longer served (404: its CRD deleted), ends the
        # operator with one line (`refused`, `gone`), without kopf's tracebacks.
        failed = task_failed and isinstance(
            error, kopf_errors.APIForbiddenError | kopf_errors.APINotFoundError
        )
        if refusal.given_up:
            return record.levelno < logging.INFO
        refusal_said = kopfretrylogs.REFUSED in message
        escalated = record.name == WATCHING and ESCALATION in message and refusal_said
        if failed or escalated:
            refusal.give_up()
        return not refusal.given_up


FILTER = _SaidOnExit()
#: kopf's loggers that say a watch given up on (the request's, its tasks') and its stop, and
#: the operator's of kopf's retries.
LOGGERS = (
    WATCHING,
    "kopf._core.reactor.queueing",
    "kopf._core.reactor.orchestration",
    "kopf._core.reactor.running",
    "kopf._core.reactor.observation",
    kopfretrylogs.__name__,
)


def install() -> None:
    """Say a refused watch through `refused`: call it in the task that starts kopf."""
    REFUSAL.set(_Refusal())
    for name in LOGGERS:
        kopf_logger = logging.getLogger(name)
        if FILTER not in kopf_logger.filters:
            kopf_logger.addFilter(FILTER)


def refused(error: kopf_errors.APIForbiddenError, *, retried_seconds: float) -> errors.Forbidden:
    """The one error that says what kopf was refused, whose right it is, and what to apply."""
    said = error.message or str(error) or "403 Forbidden"
    found = _REFUSAL.search(said)
    if found is None:
        return errors.Forbidden(
            f"the Kubernetes API refused a watch of the operator's for {retried_seconds:.0f} s "
            f"of retries (403: {said}): {ADVICE}"
        )
    user = found["user"]
    account = _SERVICE_ACCOUNT.fullmatch(user)
    who = f"ServiceAccount {account['namespace']}/{account['name']}" if account else f"user {user}"
    resource = found["resource"] + (f".{found['group']}" if found["group"] else "")
    where = f"in namespace {found['namespace']}" if found["namespace"] else "cluster-wide"
    return errors.Forbidden(
        f"the operator's identity, {who}, may not {found['verb']} {resource} {where}: the "
        f"Kubernetes API answered 403 for {retried_seconds:.0f} s of retries; {ADVICE}"
    )


def gone(error: kopf_errors.APINotFoundError) -> errors.ResourceGone:
    """The one error that says a watch of kopf's found its resource no longer served, as when
    its CRD is deleted while the operator runs: kopf stops on it, and so does the operator;
    Kubernetes restarts it, and it serves again once the CRD is back."""
    said = error.message or str(error) or "404 Not Found"
    return errors.ResourceGone(
        f"the Kubernetes API stopped serving a resource the operator watches (404: {said}), "
        "as when its CRD is deleted while the operator runs: apply crds/ (the "
        "EventHubConsumer CRD) and, with --peering, manifests/peering/kopf-peering-crds.yaml; "
        "the operator serves again once it is restarted with them"
    )


#: The callback of kopf 1.45's ``api.stream`` that fails when a watch's pause waiter ends while
#: its request is being opened (it looks for the task it runs in; a callback runs in none).
STREAM_CALLBACK = "request_cancel_callback"


def _kopf_stream_callback_failed(context: dict[str, Any]) -> bool:
    return isinstance(context.get("exception"), AssertionError) and STREAM_CALLBACK in repr(
        context.get("handle")
    )


async def run(operator: Coroutine[Any, Any, None]) -> None:
    """Run kopf's operator (`operator`, not yet started) until it ends; once a task of its
    failed (a refused watch, or one the API server failed past kopf's retries), its stop is
    bounded, and the refusal, or else that error, is what is raised. Call it in the task that
    called `install`."""
    refusal = REFUSAL.get()
    loop = asyncio.get_running_loop()
    stock_handler = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if refusal.stopping.is_set() and _kopf_stream_callback_failed(context):
            logger.debug("kopf's %s failed while it stopped (left out)", STREAM_CALLBACK)
        elif stock_handler is not None:
            stock_handler(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
    operating = asyncio.ensure_future(operator)
    stopping = asyncio.ensure_future(refusal.stopping.wait())
    try:
        await asyncio.wait({operating, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not operating.done():
            await asyncio.wait({operating}, timeout=STOP_GRACE_SECONDS)
        for attempt in range(1, CANCELS + 1):
            if operating.done():
                break
            logger.debug("kopf did not stop after a task of its failed; cancelled (%d)", attempt)
            operating.cancel()
            await asyncio.wait({operating}, timeout=CANCEL_INTERVAL_SECONDS)
    except asyncio.CancelledError:  # stopped from outside: kopf's own way, as before
        operating.cancel()
        await asyncio.wait({operating})
        raise
    finally:
        stopping.cancel()
        refused_error = refusal.error()  # and the others read, so none is "never retrieved"
        if loop.get_exception_handler() is handle:  # not replaced since by another's
            loop.set_exception_handler(stock_handler)
    if operating.done() and not operating.cancelled():
        operating.result()  # kopf's own end: the refusal it raised, or any other error
        return
    if refused_error is not None:  # cancelled here, after a task of its failed
        raise refused_error
    state = "was cancelled" if operating.done() else f"did not stop after {CANCELS} cancellations"
    raise RuntimeError(f"kopf {state} after a task of its failed")
