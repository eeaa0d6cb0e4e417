"""kopf's watches, listed and watched again when kopf gives up on one, as kopf does for a 429.

kopf 1.45 lists each kind it serves, watches it from the listing's version, and lists again
after a 410. A listing that the API server fails with an error that passes (5xx: etcd's
leader changing, a watch cache being rebuilt after the API server restarted) is retried
through kopf's error backoffs, about a minute, and then given up on: the watch's task fails,
kopf stops, and the operator with it. An error event in the stream other than a 410 (a 504
``Too large resource version`` from an API server whose watch cache lags another's) stops
it at once. Kubernetes then restarts the operator at a back-off that doubles up to 5
minutes, so an outage of a minute and a half could leave a gone pod's partitions where they
were for minutes after it ended; and each stop said about 150 lines (kopf's escalation and
tracebacks). Replayed on the local API server with the EventHubConsumers' listing answered
503: the operator stopped after kopf's retries.

kopf already goes on after a throttled watch (429: "this stream is not allowed to fail").
`install` makes it go on after these too, as client-go's reflectors do: the watch is listed
and watched again `RESTART_SECONDS` after kopf gave up, for as long as the API server fails
it. Meanwhile the cycles go on with what was read, and each of their writes carries its
precondition, as behind any watch that lags. What is said is
`kopfretrylogs`' one warning when kopf's requests start to fail and one line when they
succeed again: kopf's giving up on a watch's request counts as one more retry (`WATCHING`
marks those requests). A refusal (403) still ends kopf, to be said in one line
(`kopfrefusals`), and so does every other error. A kopf whose watches no longer go through
``watching.infinite_watch`` fails `tests/handlers/test_kopf_watches.py`, so an upgrade
cannot drop this silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, cast

from kopf._cogs.clients import errors as kopf_errors
from kopf._cogs.clients import watching

from eventhub_balancer.handlers import cyclefaults

logger = logging.getLogger(__name__)

Watch = Callable[..., AsyncIterator[Any]]

#: kopf's endless watch of one kind in one namespace, which its watchers look up on its
#: module at each start; `install` replaces it with `infinite_watch`.
STOCK_INFINITE_WATCH: Watch = watching.infinite_watch

#: How long after kopf gave up on a watch it is listed again: kopf's retries waited about a
#: minute before an escalation, and an error event comes at most once per listing.
RESTART_SECONDS = 1.0

#: Set while kopf runs a step of a watch (its listing, its watch request): kopf or
#: `infinite_watch` opens such a request again whenever kopf gives up on it, but a refusal.
WATCHING: contextvars.ContextVar[bool] = contextvars.ContextVar("ehb_kopf_watching", default=False)


def _where(kwargs: dict[str, Any]) -> str:
    namespace = kwargs.get("namespace")
    place = f"in {namespace}" if namespace is not None else "cluster-wide"
    return f"{kwargs.get('resource')} {place}"


async def _marked(stream: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    """The events of ``stream``, each step of it run with `WATCHING` set (and only that: the
    workers kopf starts for the events it gets are started outside it)."""
    while True:
        token = WATCHING.set(True)
        try:
            event = await anext(stream)
        except StopAsyncIteration:
            return
        finally:
            WATCHING.reset(token)
        yield event


async def infinite_watch(**kwargs: Any) -> AsyncIterator[Any]:
    """kopf's ``watching.infinite_watch``, started again after what may pass: a 5xx that kopf
    retried and gave up on, and an error event of the stream (``watching.WatchingError``)."""
    where = _where(kwargs)
    said_at: float | None = None
    while True:
        try:
            # Async generators (kopf types its own as the iterator it is), closed when this
            # one is, as kopf's watcher closes it when cancelled.
            stock = cast(AsyncGenerator[Any, None], STOCK_INFINITE_WATCH(**kwargs))
            async with (
                contextlib.aclosing(stock) as stream,
                contextlib.aclosing(_marked(stream)) as marked,
            ):
                async for event in marked:
                    yield event
            return  # kopf's ends only when a test bounds its iterations
        except kopf_errors.APIServerError as e:
            # Said already, by `kopfretrylogs`, as a retry of kopf's requests.
            logger.debug("watch of %s: kopf gave up on %s; listing it again", where, e)
        except watching.WatchingError as e:
            now = asyncio.get_running_loop().time()
            if said_at is None or now - said_at >= cyclefaults.REMIND_SECONDS:
                said_at = now
                logger.warning(
                    "the watch of %s ended with an error (%s); it is listed and watched again "
                    "(said again at most every %.0f minutes)",
                    where,
                    e,
                    cyclefaults.REMIND_SECONDS / 60,
                )
            else:
                logger.debug("watch of %s: %s; listing it again", where, e)
        await asyncio.sleep(RESTART_SECONDS)


def install() -> None:
    """Make kopf's watchers watch through `infinite_watch` (idempotent; before it starts)."""
    watching.infinite_watch = infinite_watch
