"""Outages of the real API server, made by a TCP proxy in front of it.

The local API pauses on demand (`kube.LocalKubeAPI.pause`); a real kube-apiserver has no
such door. This proxy stands between the clients under test (the operator, say) and the real
server, at the TCP level, so TLS passes through untouched and the server's certificate still
matches (both are on 127.0.0.1). ``cut()`` starts an outage as a client meets one when its
node loses the control plane: every open connection (watches included) is closed at once and
new connections hang until ``restore()``, which lets them through in the order they came.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import Self

from eventhub_balancer import runners

logger = logging.getLogger(__name__)

#: How much is copied at a time (a watch event or an answer is usually far smaller).
CHUNK = 64 * 1024

#: The longest wait for the proxy's loop to start or stop.
LOOP_TIMEOUT_S = 10.0


class OutageProxy:
    """A TCP proxy on 127.0.0.1 to ``upstream_port``; `cut` and `restore` an outage."""

    def __init__(self, upstream_port: int, *, host: str = "127.0.0.1") -> None:
        self._upstream = (host, upstream_port)
        self._host = host
        self._loop = runners.BackgroundLoop(name="outage-proxy", timeout=LOOP_TIMEOUT_S)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._restored: asyncio.Event | None = None
        self.port = 0
        #: Connections closed by an outage, and connections that waited for its end.
        self.closed = 0
        self.held = 0

    @property
    def url(self) -> str:
        return f"https://{self._host}:{self.port}"

    def start(self) -> Self:
        self._loop.start(timeout=LOOP_TIMEOUT_S)
        self.port = self._loop.run(self._serve(), timeout=LOOP_TIMEOUT_S)
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.run(self._close(), timeout=LOOP_TIMEOUT_S)
        self._loop.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def cut(self) -> None:
        """Start an outage: close every connection, hold new ones until `restore`."""
        self._loop.run(self._cut(), timeout=LOOP_TIMEOUT_S)

    def restore(self) -> None:
        self._loop.run(self._restore(), timeout=LOOP_TIMEOUT_S)

    @property
    def cut_now(self) -> bool:
        return self._restored is not None and not self._restored.is_set()

    async def _serve(self) -> int:
        self._restored = asyncio.Event()
        self._restored.set()
        self._server = await asyncio.start_server(self._connection, self._host, 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()
        if self._restored is not None:
            self._restored.set()

    async def _cut(self) -> None:
        assert self._restored is not None
        self._restored.clear()
        writers, self._open = list(self._open), set()
        for writer in writers:
            self.closed += 1
            writer.transport.abort()
        logger.info("outage: %d connections closed, new ones held", len(writers))

    async def _restore(self) -> None:
        assert self._restored is not None
        self._restored.set()
        logger.info("outage over")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._restored is not None
        if not self._restored.is_set():
            self.held += 1
            await self._restored.wait()
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        self._open.update((writer, upstream_writer))
        try:
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
            )
        finally:
            for end in (writer, upstream_writer):
                self._open.discard(end)
                end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(CHUNK):
                writer.write(chunk)
                await writer.drain()
        writer.transport.abort()
