"""A fault-injecting HTTP proxy for the local stack (in front of Azurite, or any HTTP service).

Retry code is only trustworthy if it has met the failures it claims to survive. This proxy
forwards requests on 127.0.0.1 to an upstream port and, by a plan that can change while it
runs, delays them, answers 500/503 instead of forwarding, closes the connection before
forwarding (the request never arrived) or after forwarding (it arrived, its answer is lost),
answers a burst of 412 to conditional writes, answers a burst as a throttled storage account
does (503 ServerBusy, 500 OperationTimedOut), or forwards and then holds the answer (the
request took effect, its answer is slow). Decisions come from a seeded RNG, so a run
can be repeated. It runs in the caller's event loop (``async with``) or in its own thread
(``with``), for tests whose code under test owns the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Final

import aiohttp
import yarl
from aiohttp import web

from eventhub_balancer import runners
from eventhub_balancer_devstack.faultplans import Faults

logger = logging.getLogger(__name__)

#: Headers that belong to one connection, not to the request (RFC 9110 section 7.6.1).
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)

#: The storage service's error codes for the statuses we inject, so SDKs map them as usual.
ERROR_CODES: Final = {500: "InternalError", 503: "ServerBusy", 412: "ConditionNotMet"}
#: What a storage account over its limits answers instead of serving a request.
THROTTLED_CODES: Final = {503: "ServerBusy", 500: "OperationTimedOut"}


def _error_response(status: int, *, method: str, throttled: bool = False) -> web.Response:
    code = (THROTTLED_CODES if throttled else ERROR_CODES).get(status, "InternalError")
    headers = {"x-ms-error-code": code, "x-ms-request-id": "fault-proxy"}
    if method == "HEAD":
        return web.Response(status=status, headers=headers)
    body = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f"<Error><Code>{code}</Code><Message>injected by the fault proxy</Message></Error>"
    )
    return web.Response(status=status, headers=headers, text=body, content_type="application/xml")


class _Dropped(Exception):
    """The connection was closed on purpose."""


@web.middleware
async def _swallow_drops(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except _Dropped:
        # The transport is gone; this response is never written.
        return web.Response(status=499)


class FaultProxy:
    """Forwards ``127.0.0.1:<port>`` to ``<upstream_host>:<upstream_port>`` under ``faults``."""

    def __init__(
        self,
        upstream_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream_host: str = "127.0.0.1",
    ) -> None:
        self.upstream = f"http://{upstream_host}:{upstream_port}"
        self.host = host
        self._requested_port = port
        self._port = 0
        self.faults = Faults()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._background: runners.BackgroundLoop | None = None

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the fault proxy is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- serving

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        decision = self.faults.decide(
            method=request.method, conditional="If-Match" in request.headers
        )
        if decision.delay:
            await asyncio.sleep(decision.delay)
        if decision.drop_request:
            self._drop(request)
        if decision.status is not None:
            return _error_response(
                decision.status, method=request.method, throttled=decision.throttled
            )
        if self.faults.refuse_fence(
            method=request.method, path=request.path, headers=request.headers
        ):
            logger.info("lease trap: refusing the unleased fence of %s", request.path)
            return _error_response(412, method=request.method)
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self._session.request(
            request.method,
            # Verbatim: a re-encoded path ('$' vs '%24') names another blob in Azurite.
            yarl.URL(self.upstream + request.raw_path, encoded=True),
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
            skip_auto_headers=("Content-Type", "User-Agent", "Accept-Encoding", "Accept"),
        ) as upstream:
            payload = await upstream.read()
            status = upstream.status
            answer_headers = [
                (k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP
            ]
            length = upstream.headers.get("Content-Length")
        self.faults.forwarded(
            method=request.method, path=request.path, headers=request.headers, status=status
        )
        if decision.drop_response:
            self._drop(request)
        if decision.answer_delay:
            await asyncio.sleep(decision.answer_delay)
        if self.faults.spring_trap(
            method=request.method,
            path=request.path,
            lease_action=request.headers.get("x-ms-lease-action"),
        ):
            logger.info("lease trap sprung on %s", request.path)
            await self.faults.hold_trap()
            self._drop(request)
        response = web.Response(status=status, body=payload if request.method != "HEAD" else None)
        for key, value in answer_headers:
            response.headers.add(key, value)
        if request.method == "HEAD" and length is not None:
            response.headers["Content-Length"] = length
        return response

    @staticmethod
    def _drop(request: web.Request) -> None:
        if request.transport is not None:
            request.transport.abort()
        raise _Dropped()

    async def start(self) -> FaultProxy:
        """Start serving in the running event loop."""
        app = web.Application(middlewares=[_swallow_drops])
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._session = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60)
        )
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.5
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        self._port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        logger.info("fault proxy on %s -> %s", self.url, self.upstream)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._port = 0

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- in a thread of its own

    def start_in_thread(self, *, timeout: float = 10.0) -> FaultProxy:
        """Serve from a daemon thread with its own event loop; returns once listening."""
        background = runners.BackgroundLoop(name="fault-proxy", timeout=timeout).start()
        try:
            background.enter(lambda: self)
        except BaseException as e:
            with contextlib.suppress(TimeoutError):
                background.stop()
            if isinstance(e, TimeoutError):
                raise RuntimeError(f"the fault proxy did not start within {timeout} s") from e
            raise
        self._background = background
        return self

    def stop_thread(self, *, timeout: float = 10.0) -> None:
        background, self._background = self._background, None
        if background is None:
            return
        try:
            background.stop(timeout=timeout)
        except TimeoutError as e:
            raise RuntimeError(f"the fault proxy thread did not stop within {timeout} s") from e

    def __enter__(self) -> FaultProxy:
        return self.start_in_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_thread()
