"""kopf's retries of its own API requests, said once per outage (`kopfretrylogs`).

kopf logs each retry of its requests (its watches, its patches) as an ERROR: an API server
that throttled for a minute made dozens, at ERROR, during the outage on-call reads. Here
kopf's real request runs its real retries on fake time, against a session that answers as
kube-apiserver's API Priority and Fairness does (429, ``Retry-After: 1``, a plain-text body).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import aiohttp
import kopf
import pytest
from kopf._cogs.clients import api
from kopf._cogs.clients import errors as kopf_errors

from eventhub_balancer.handlers import cyclefaults, kopfretrylogs, kopfwatches

pytestmark = pytest.mark.looptime

WATCH = "/api/v1/namespaces/shop/pods?watch=true"
#: kopf's logger of its watches, which its retries are logged on.
KOPF_LOGGER = logging.getLogger("kopf._cogs.clients.watching")


class Answer:
    """What kube-apiserver answers a request that API Priority and Fairness rejects (or 200)."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.headers = {"Retry-After": "1", "Content-Type": "text/plain; charset=utf-8"}

    async def json(self) -> Any:
        raise json.JSONDecodeError("not JSON", "", 0)

    async def text(self) -> str:
        return "Too many requests, please try again later.\n"

    def raise_for_status(self) -> None:
        if self.status >= 400:
            raise aiohttp.ClientResponseError(
                None,  # type: ignore[arg-type]
                (),
                status=self.status,
                headers=self.headers,  # type: ignore[arg-type]
            )


class Context:
    server = "https://kube.test"

    def __init__(self, session: Session) -> None:
        self.session = session


class Session:
    """Throttles every request until `until` (loop time), then answers 200."""

    closed = False

    def __init__(self, until: dict[str, float]) -> None:
        self.until = until
        self.requests: list[tuple[float, str]] = []

    async def request(self, *, method: str, url: str, **_: Any) -> Answer:
        now = asyncio.get_running_loop().time()
        path = url.removeprefix(Context.server)
        self.requests.append((now, path))
        return Answer(429 if now < self.until.get(path, 0.0) else 200)


@pytest.fixture
def stock() -> Iterator[None]:
    """kopf's own request, whatever a test installed."""
    yield
    api.request = kopfretrylogs.STOCK_REQUEST  # type: ignore[assignment]


def settings(backoffs: Any = None) -> kopf.OperatorSettings:
    configured = kopf.OperatorSettings()
    if backoffs is not None:
        configured.networking.error_backoffs = backoffs
    return configured


async def send(url: str, session: Session, configured: kopf.OperatorSettings) -> Any:
    # Looked up on kopf's module at the call, as kopf's api.get, api.patch and api.stream do.
    return await api.request(
        "get", url, settings=configured, context=Context(session), logger=KOPF_LOGGER
    )


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


async def test_a_throttle_kopf_retries_through_is_said_once_and_its_end_once(
    caplog: pytest.LogCaptureFixture, stock: None
) -> None:
    kopfretrylogs.install()
    session = Session({url: 20.0 for url in (WATCH, WATCH + "&x=1", WATCH + "&x=2")})
    with caplog.at_level(logging.DEBUG):
        # Three watches at once, as kopf's are: all retried through the 20 s of throttling.
        await asyncio.gather(*(send(url, session, settings()) for url in session.until))
        retried = len(session.requests) - 3
        # Right after the last retry, the outage is not said to end (a throttle lets some
        # requests through); a request that succeeds some seconds later ends it.
        assert not [line for line in lines(caplog, logging.INFO) if "succeed again" in line]
        await asyncio.sleep(kopfretrylogs.QUIET_SECONDS)
        await send(WATCH, session, settings())
    assert retried > 15  # kopf retried each, as it always has
    assert lines(caplog, logging.ERROR) == []
    (warned,) = lines(caplog, logging.WARNING)
    assert "fail and are retried" in warned
    assert "APITooManyRequestsError" in warned
    (back,) = [line for line in lines(caplog, logging.INFO) if "succeed again" in line]
    assert f"after {retried} retries" in back
    # The retries in between are still there at DEBUG, on kopf's logger.
    debug = [r for r in caplog.records if r.name == KOPF_LOGGER.name and r.levelno == logging.DEBUG]
    assert sum("will retry" in r.getMessage() for r in debug) == retried - 1


async def test_without_it_kopf_logs_every_retry_as_an_error(
    caplog: pytest.LogCaptureFixture, stock: None
) -> None:
    """What the wrapper is for (if kopf stops logging retries as errors, drop it)."""
    session = Session({WATCH: 20.0})
    with caplog.at_level(logging.INFO):
        await send(WATCH, session, settings())
    errors = lines(caplog, logging.ERROR)
    assert len(errors) == len(session.requests) - 1 >= 5
    assert all(e.startswith(kopfretrylogs.RETRY_PREFIX) for e in errors)
    assert all(kopfretrylogs.RETRY_MARK in e for e in errors)


async def test_a_long_outage_is_reminded_of_and_what_kopf_gives_up_on_stays_an_error(
    caplog: pytest.LogCaptureFixture, stock: None
) -> None:
    kopfretrylogs.install()
    outage = 3 * cyclefaults.REMIND_SECONDS + 100
    session = Session({WATCH: outage + 1000})
    with caplog.at_level(logging.INFO), pytest.raises(kopf_errors.APITooManyRequestsError):
        await send(WATCH, session, settings(backoffs=[10.0] * int(outage / 10)))
    warned = lines(caplog, logging.WARNING)
    assert len(warned) == 4  # the start, and a reminder every 10 minutes
    assert all("still fail" in line for line in warned[1:])
    (gave_up,) = lines(caplog, logging.ERROR)
    assert "escalating" in gave_up
    # A request that succeeds after it ends the outage, said once.
    session.until[WATCH] = 0.0
    session.until[WATCH + "&y"] = asyncio.get_running_loop().time() + 5
    with caplog.at_level(logging.INFO):
        await send(WATCH + "&y", session, settings())
        await asyncio.sleep(kopfretrylogs.QUIET_SECONDS)
        await send(WATCH, session, settings())
    assert any("succeed again" in line for line in lines(caplog, logging.INFO))


async def test_a_request_that_never_failed_ends_no_outage(
    caplog: pytest.LogCaptureFixture, stock: None
) -> None:
    """One watch still retried, another request succeeding at once: the outage goes on."""
    kopfretrylogs.install()
    session = Session({WATCH: 30.0})
    with caplog.at_level(logging.INFO):
        retried = asyncio.create_task(send(WATCH, session, settings()))
        await asyncio.sleep(3)
        await send("/api/v1/namespaces/shop/configmaps", session, settings())
        assert not [line for line in lines(caplog, logging.INFO) if "succeed again" in line]
        await retried
        await asyncio.sleep(kopfretrylogs.QUIET_SECONDS)
        await send(WATCH, session, settings())
    assert [line for line in lines(caplog, logging.INFO) if "succeed again" in line]


async def test_a_watch_cancelled_in_its_retries_and_reopened_ends_the_outage(
    caplog: pytest.LogCaptureFixture, stock: None
) -> None:
    """kopf gives a watch's request, retries included, its inactivity timeout (10 s here):
    a watch throttled longer is cancelled in its retries and opened again by a new request,
    which may succeed at its first attempt. That ends the outage too."""
    kopfretrylogs.install()
    session = Session({WATCH: 19.5})
    opened = 0
    with caplog.at_level(logging.INFO):
        for _ in range(3):  # cancelled at 10 s and 20 s, then open at its first attempt
            opened += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await send(WATCH, session, settings())
                    break
    assert opened == 3
    assert session.requests[-1][0] == 20.0 > session.requests[-2][0]  # at its first attempt
    # 3 s after the last retry: a throttle that lets one through is not over yet.
    assert not [line for line in lines(caplog, logging.INFO) if "succeed again" in line]
    await asyncio.sleep(kopfretrylogs.QUIET_SECONDS)
    with caplog.at_level(logging.INFO):
        await send(WATCH, session, settings())  # its next reconnection, at its first attempt
    assert len(lines(caplog, logging.WARNING)) == 1
    (back,) = [line for line in lines(caplog, logging.INFO) if "succeed again" in line]
    assert "retries over" in back


class Refusing(Session):
    """Refuses every request until `until` (403), then answers 200."""

    async def request(self, *, method: str, url: str, **_: Any) -> Answer:
        answer = await super().request(method=method, url=url)
        answer.status = 403 if answer.status == 429 else answer.status
        return answer


@pytest.mark.parametrize(
    ("session", "watching", "error"),
    [
        (Session({WATCH: 100.0}), True, None),
        (Session({WATCH: 100.0}), False, kopf_errors.APITooManyRequestsError),
        (Refusing({WATCH: 100.0}), True, kopf_errors.APIForbiddenError),
    ],
    ids=["a watch's request", "another request", "a watch's request refused"],
)
async def test_a_watchs_request_kopf_gives_up_on_is_one_more_retry_unless_refused(
    caplog: pytest.LogCaptureFixture,
    stock: None,
    session: Session,
    watching: bool,
    error: type[Exception] | None,
) -> None:
    """kopf, or `kopfwatches`, opens a watch again after it gave up on its request: that is
    one more retry of the outage said once. What else kopf gives up on stays kopf's error,
    and so does a refusal, which ends kopf (`kopfrefusals`)."""
    kopfretrylogs.install()
    token = kopfwatches.WATCHING.set(watching)
    try:
        with caplog.at_level(logging.INFO), pytest.raises(kopf_errors.APIError) as raised:
            await send(WATCH, session, settings(backoffs=[1.0, 1.0]))
    finally:
        kopfwatches.WATCHING.reset(token)
    gave_up = [line for line in lines(caplog, logging.ERROR) if "escalating" in line]
    if error is None:
        assert gave_up == []
        assert len(lines(caplog, logging.WARNING)) == 1
    else:
        assert isinstance(raised.value, error)
        assert len(gave_up) == 1
