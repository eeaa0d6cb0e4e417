"""kopf's retries of its own Kubernetes API requests, said once per outage.

kopf sends each of its requests (its watches, its patches of the EventHubConsumers and of the
peering object) again after a failure that may pass (429, 5xx, a lost connection, a timeout),
through its error backoffs, and logs every retry as an ERROR: ``Request attempt #2/9 failed;
will retry: GET .../pods?watch=true... -> APITooManyRequestsError(...)``. kopf has no setting
for it (the backoffs change how often it retries, not how it says so), so an API server that
throttles for a minute flooded the log with them, at ERROR, during exactly the outage on-call
is reading: replayed on the local API server, three watches whose requests were answered 429
for 40 s made 37 such lines.

`install` hands kopf's requests a logger that says a retry once when the requests start to
fail, reminds of it at most every `cyclefaults.REMIND_SECONDS` with the retries since, and
says in one line when a request succeeds while none is retried any more, some seconds after
the last retry (`QUIET_SECONDS`: a throttle that lets some through is one outage); the
retries in between go to kopf's logger at DEBUG. A request of a watch that kopf gives up on
(``failed; escalating``) is one more retry, since the watch is opened again (`kopfwatches`),
unless it was refused; what else kopf gives up on and every other line of kopf's stay as kopf
says them. A kopf that no longer logs its retries this way fails
`tests/handlers/test_kopf_retry_logs.py`, so an upgrade cannot bring the flood back silently.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kopf._cogs.clients import api
from kopf._cogs.clients import errors as kopf_errors

from eventhub_balancer.handlers import cyclefaults, kopfwatches

logger = logging.getLogger(__name__)

Request = Callable[..., Awaitable[Any]]

#: kopf's request, which every one of its API calls goes through (``api.get``, ``api.patch``,
#: ``api.stream``... call it by its module's name); `install` wraps it.
STOCK_REQUEST: Request = api.request

#: An outage ends at a request that succeeds this long after the last retry, none being
#: retried then: a throttle that lets some requests through (kopf's watches are opened again
#: every 10 s, `kopfwiring.WATCH_INACTIVITY_SECONDS`) is one outage, not a start and an end
#: every few seconds.
QUIET_SECONDS = 10.0
#: How kopf words a failed attempt it will make again.
RETRY_PREFIX = "Request attempt "
RETRY_MARK = "failed; will retry:"
#: How kopf words a request it gives up on.
ESCALATION_MARK = "failed; escalating:"
#: How kopf names a refusal (403) in its retry line, and where the API server's Status body,
#: which repeats the message kopf quoted before it, starts.
REFUSED = f"{kopf_errors.APIForbiddenError.__name__}("
STATUS_BODY = ", {'kind': 'Status'"


class RetryLog:
    """The kopf requests of one operator that are being retried now."""

    def __init__(self) -> None:
        self._retrying: set[_Attempts] = set()
        self._since: float | None = None
        self._said = 0.0
        self._retries = 0
        self._last = ""
        self._last_at = 0.0

    def retried(self, attempts: _Attempts, message: str, *, now: float) -> None:
        self._retrying.add(attempts)
        self._retries += 1
        self._last, self._last_at = message, now
        if self._since is None:
            self._since = self._said = now
            if REFUSED in message:
                # kopf gives up on a refusal after its backoffs; `kopfrefusals` then says it.
                logger.warning(
                    "kopf's requests to the Kubernetes API are refused (403) and retried "
                    "until kopf gives up, about a minute; then the operator stops and says "
                    "which right its identity lacks: %s",
                    message.split(STATUS_BODY, 1)[0] + ")" if STATUS_BODY in message else message,
                )
                return
            logger.warning(
                "kopf's requests to the Kubernetes API fail and are retried (said again every "
                "%.0f minutes while it lasts, and when they succeed): %s",
                cyclefaults.REMIND_SECONDS / 60,
                message,
            )
        elif now - self._said >= cyclefaults.REMIND_SECONDS:
            self._said = now
            logger.warning(
                "kopf's requests to the Kubernetes API still fail, %d retries over %.0f s: %s",
                self._retries,
                now - self._since,
                message,
            )
        else:
            attempts.kopf_logger.debug(message)

    def ended(self, attempts: _Attempts, *, succeeded: bool, now: float) -> None:
        """A request ended. Any that succeeds while none is being retried, `QUIET_SECONDS`
        after the last retry, ends the outage: kopf cancels a watch's request in its retries
        at its inactivity timeout and opens the watch again with a new one, which may succeed
        at its first attempt."""
        self._retrying.discard(attempts)
        if (
            succeeded
            and not self._retrying
            and self._since is not None
            and now - self._last_at >= QUIET_SECONDS
        ):
            logger.info(
                "kopf's requests to the Kubernetes API succeed again after %d retries over "
                "%.0f s (last: %s)",
                self._retries,
                now - self._since,
                self._last,
            )
            self._since, self._retries, self._last = None, 0, ""


def _reopened(message: str) -> bool:
    """Whether kopf gave up on a request of one of its watches that it, or `kopfwatches`,
    opens again: any but a refusal, which ends kopf (`kopfrefusals`)."""
    return ESCALATION_MARK in message and kopfwatches.WATCHING.get() and REFUSED not in message


class _Attempts:
    """The logger one kopf request is made with: its retries go to `RetryLog`, the rest to
    kopf's logger unchanged."""

    def __init__(self, kopf_logger: Any, log: RetryLog, loop: asyncio.AbstractEventLoop) -> None:
        self.kopf_logger = kopf_logger
        self._log = log
        self._loop = loop

    def error(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if (
            isinstance(msg, str)
            and not args
            and msg.startswith(RETRY_PREFIX)
            and (RETRY_MARK in msg or _reopened(msg))
        ):
            self._log.retried(self, msg, now=self._loop.time())
        else:
            self.kopf_logger.error(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kopf_logger, name)


#: The operator's `RetryLog`, set by `install` in the task that starts kopf, whose tasks
#: inherit it: two operators in one process (the tests' replicas) each keep their own.
LOG: contextvars.ContextVar[RetryLog] = contextvars.ContextVar("ehb_kopf_retry_log")


async def request(*args: Any, logger: Any, **kwargs: Any) -> Any:
    """kopf's request, whose retries are said through `RetryLog`."""
    log = LOG.get(None)
    if log is None:  # a kopf request outside an operator that installed it: kopf's own way
        return await STOCK_REQUEST(*args, logger=logger, **kwargs)
    loop = asyncio.get_running_loop()
    attempts = _Attempts(logger, log, loop)
    try:
        response = await STOCK_REQUEST(*args, logger=attempts, **kwargs)
    except BaseException:
        log.ended(attempts, succeeded=False, now=loop.time())
        raise
    log.ended(attempts, succeeded=True, now=loop.time())
    return response


def install() -> None:
    """Make kopf's requests say their retries through `request`, into a `RetryLog` of this
    task's (and of the tasks it starts: call it in the task that starts kopf)."""
    api.request = request
    LOG.set(RetryLog())
