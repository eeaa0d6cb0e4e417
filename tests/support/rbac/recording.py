"""A recording reverse proxy between a Kubernetes client and an API server (127.0.0.1 only).

Point the client's kubeconfig ``server`` at ``proxy.url``: every request is forwarded to the
upstream unchanged (streamed, so watches keep working) and recorded as the authorizer would see
it (`requestinfo.RequestInfo`), together with the upstream's status code. One proxy per subject
(the operator, a consumer pod) keeps the recordings apart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import ssl
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from eventhub_balancer_devstack import faultproxy
from tests.support.rbac import requestinfo

#: Hop-by-hop headers (RFC 9110, 7.6.1) are the proxy's own business, never forwarded.
HOP_BY_HOP = faultproxy.HOP_BY_HOP

#: The chunk size for streamed responses: watch events are small, forward them at once.
CHUNK_SIZE = 64 * 1024


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recorded:
    """One proxied request: what RBAC sees, the raw method and path, and the upstream status."""

    info: requestinfo.RequestInfo
    method: str
    path_qs: str
    status: int
    #: for a PATCH or PUT: the object before (read by the proxy itself, unrecorded) and the
    #: API server's answer (the object after), for admission policies to be run against
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class RecordingProxy:
    """``async with RecordingProxy(upstream) as proxy``: forwards and records until closed."""

    def __init__(
        self,
        upstream: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream_ssl: ssl.SSLContext | bool | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.host = host
        self.port = port
        self.upstream_ssl = upstream_ssl
        self.recorded: list[Recorded] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[requestinfo.RequestInfo]:
        return [r.info for r in self.recorded]

    async def start(self) -> None:
        # No total timeout: watches stay open as long as the client keeps them.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # A client that hangs up cancels its handler, so an abandoned watch stops upstream too.
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, handler_cancellation=True
        )
        await self._runner.setup()
        # Bind first, so that port 0 resolves to a free port we can report.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        # The upstream session first: open watches end, and their handlers with them.
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> RecordingProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _read(self, path: str) -> dict[str, Any] | None:
        """The object at ``path`` as it is now (the proxy's own read, never recorded)."""
        assert self._session is not None
        async with self._session.get(self.upstream + path, ssl=self.upstream_ssl) as got:
            if got.status != 200:
                return None
            result: dict[str, Any] = await got.json(content_type=None)
            return result

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        info = requestinfo.request_info(request.method, request.path, dict(request.query))
        headers = CIMultiDict(
            (k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP
        )
        body = await request.read()
        mutates = request.method in ("PATCH", "PUT")
        before = await self._read(request.path) if mutates else None
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
            ssl=self.upstream_ssl,
        ) as upstream:
            after = None
            if mutates:
                content = await upstream.read()
                with contextlib.suppress(ValueError):
                    after = json.loads(content)
            self.recorded.append(
                Recorded(
                    info=info,
                    method=request.method,
                    path_qs=request.path_qs,
                    status=upstream.status,
                    before=before,
                    after=after,
                )
            )
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers.add(key, value)
            await response.prepare(request)
            if mutates:
                await response.write(content)
                await response.write_eof()
                return response
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientError):
                # One side went away (a watch closed by the client, the proxy closing).
                pass
            return response
