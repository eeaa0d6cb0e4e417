"""kopf's watches, listed and watched again when kopf gives up on one (`kopfwatches`).

kopf's own endless watch is replaced here by a stand-in that fails as kopf's does: with the
5xx its listing's retries ended in, or with an error event of the stream; on fake time.
`tests/handlers/wire/test_failing_watches.py` runs kopf's real one on the local API server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kopf._cogs.clients import errors as kopf_errors
from kopf._cogs.clients import watching
from kopf._core.reactor import queueing

from eventhub_balancer.handlers import cyclefaults, kopfwatches

pytestmark = pytest.mark.looptime

KWARGS = {"resource": "pods.v1", "namespace": "shop"}


def unavailable() -> kopf_errors.APIServerError:
    status = {"message": "etcdserver: leader changed", "code": 503}
    return kopf_errors.APIServerError(status, status=503, headers={})  # type: ignore[arg-type]


def refused() -> kopf_errors.APIForbiddenError:
    return kopf_errors.APIForbiddenError("pods is forbidden", status=403, headers={})


def error_event() -> watching.WatchingError:
    return watching.WatchingError("Error in the watch-stream: {'code': 504}")


class Stock:
    """kopf's endless watch: each start fails with the next of `failures` (at once, or after
    its events), or, when they run out, yields `events` and ends (as kopf's does in tests)."""

    def __init__(self, failures: list[BaseException], events: list[str]) -> None:
        self.failures = failures
        self.events = events
        self.starts: list[float] = []
        self.watching: list[bool] = []
        self.closed = 0

    async def __call__(self, **kwargs: Any) -> AsyncIterator[str]:
        assert kwargs == KWARGS
        self.starts.append(asyncio.get_running_loop().time())
        try:
            self.watching.append(kopfwatches.WATCHING.get())
            if self.failures:
                raise self.failures.pop(0)
            for event in self.events:
                self.watching.append(kopfwatches.WATCHING.get())
                yield event
        finally:
            self.closed += 1


@pytest.fixture
def stock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """kopf's own endless watch back on its module, whatever a test installed."""
    yield
    monkeypatch.setattr(watching, "infinite_watch", kopfwatches.STOCK_INFINITE_WATCH)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def watched(stand_in: Stock, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """What kopf's watcher gets through `kopfwatches.infinite_watch`, each event with whether
    `WATCHING` was set when the watcher got it."""
    monkeypatch.setattr(kopfwatches, "STOCK_INFINITE_WATCH", stand_in)
    got = []
    async for event in kopfwatches.infinite_watch(**KWARGS):
        got.append((event, kopfwatches.WATCHING.get()))
    return got


def test_kopfs_watchers_watch_through_it_once_installed(stock: None) -> None:
    """kopf's watcher looks its endless watch up on kopf's module at each start: a kopf that
    no longer does would drop the restarts silently."""
    assert queueing.watching is watching
    kopfwatches.install()
    assert watching.infinite_watch is kopfwatches.infinite_watch
    kopfwatches.install()  # idempotent
    assert watching.infinite_watch is kopfwatches.infinite_watch


async def test_a_5xx_kopf_gave_up_on_is_listed_again_and_said_by_kopfs_retry_log_alone(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = Stock([unavailable(), unavailable()], ["a", "b"])
    with caplog.at_level(logging.DEBUG, logger=kopfwatches.__name__):
        got = await watched(stand_in, monkeypatch)
    assert got == [("a", False), ("b", False)]
    assert stand_in.starts == [0.0, kopfwatches.RESTART_SECONDS, 2 * kopfwatches.RESTART_SECONDS]
    assert stand_in.closed == 3
    # Each step of kopf's watch ran with WATCHING set; the watcher got its events without.
    assert stand_in.watching == [True] * 5
    assert warnings(caplog) == []  # `kopfretrylogs` says the outage
    debug = [r.getMessage() for r in caplog.records if r.name == kopfwatches.__name__]
    assert len(debug) == 2
    assert all("leader changed" in line for line in debug)


async def test_an_error_event_is_listed_again_and_said_once_per_reminder(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Error events come at most once per listing: the first is said, the next ones within
    `cyclefaults.REMIND_SECONDS` go to DEBUG, and one after it is said again."""
    many = int(cyclefaults.REMIND_SECONDS / kopfwatches.RESTART_SECONDS) + 5
    stand_in = Stock([error_event() for _ in range(many)], ["a"])
    with caplog.at_level(logging.DEBUG, logger=kopfwatches.__name__):
        got = await watched(stand_in, monkeypatch)
    assert got == [("a", False)]
    assert len(stand_in.starts) == many + 1
    said = warnings(caplog)
    assert len(said) == 2, said
    assert "pods.v1 in shop" in said[0]
    assert "'code': 504" in said[0]
    assert "listed and watched again" in said[0]


@pytest.mark.parametrize(
    "error",
    [refused(), kopf_errors.APINotFoundError("no such kind", status=404, headers={})],
    ids=["a refusal (403)", "another error (404)"],
)
async def test_what_does_not_pass_still_ends_the_watch(
    error: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal ends kopf, to be said in one line (`kopfrefusals`); so does any other error
    than a 5xx and an error event, as it did."""
    stand_in = Stock([error], ["a"])
    with pytest.raises(type(error)):
        await watched(stand_in, monkeypatch)
    assert stand_in.starts == [0.0]


async def test_a_watch_cancelled_while_restarting_or_watching_ends_and_closes_kopfs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf stops its watchers by cancelling them: in the pause before a restart, or while
    kopf's own watch waits for events, which is closed then."""

    class Endless(Stock):
        async def __call__(self, **kwargs: Any) -> AsyncIterator[str]:
            async for event in super().__call__(**kwargs):
                yield event
            await asyncio.sleep(3600)
            yield "never"

    for at in (0.5 * kopfwatches.RESTART_SECONDS, 10.0):
        stand_in = Endless([unavailable()], ["a"])
        task = asyncio.create_task(watched(stand_in, monkeypatch))
        await asyncio.sleep(at)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stand_in.closed == len(stand_in.starts)
