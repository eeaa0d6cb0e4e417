"""The pause gate of the local API server: a control-plane outage on demand.

`apiservers` puts it in front of the server's raw request handler: while paused, requests
hang and those in flight are dropped, except for the exempt bearer tokens. It can also hold
the requests of one path alone (`PauseGate.hold`): one resource that stops answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection

import aiohttp.web

RawHandler = Callable[[aiohttp.web.BaseRequest], Awaitable[aiohttp.web.StreamResponse]]


class PauseGate:
    """Holds the server's requests while it is paused: a control-plane outage, on demand.

    While paused, every request hangs until ``resume()`` (as behind a partition: clients see
    their own timeouts), and the connections of requests in flight, watch streams included,
    are dropped at once. Requests whose bearer token is in ``exempt`` pass: the local
    kubelet's, whose pod processes must go on restarting as a node's would. Used only on
    the server's own loop.
    """

    def __init__(self) -> None:
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._paused = False
        #: parts of the paths whose requests hang until `resume`, the server paused or not
        self._holding: frozenset[str] = frozenset()
        self._exempt: frozenset[str] = frozenset()
        #: id() -> request: requests do not hash.
        self._in_flight: dict[int, aiohttp.web.BaseRequest] = {}
        self.held = 0
        self.dropped = 0

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self, *, exempt: Collection[str] = ()) -> None:
        self._exempt = frozenset(f"Bearer {token}" for token in exempt)
        self._paused = True
        self._resumed.clear()
        for request in list(self._in_flight.values()):
            if not self._passes(request) and request.transport is not None:
                request.transport.abort()
                self.dropped += 1

    def hold(self, path_part: str) -> None:
        """Hold the requests whose path contains ``path_part`` until `resume` (a resource
        whose storage or webhook stops answering); the others are answered as usual. What
        is in flight already goes on."""
        self._holding |= {path_part}
        self._resumed.clear()

    def resume(self) -> None:
        self._paused = False
        self._holding = frozenset()
        self._resumed.set()

    def _passes(self, request: aiohttp.web.BaseRequest) -> bool:
        return request.headers.get("Authorization", "") in self._exempt

    def _holds(self, request: aiohttp.web.BaseRequest) -> bool:
        if self._passes(request):
            return False
        return self._paused or any(part in request.path for part in self._holding)

    def wrap(self, handler: RawHandler) -> RawHandler:
        async def gated(request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
            if self._holds(request):
                self.held += 1
                await self._resumed.wait()
            self._in_flight[id(request)] = request
            try:
                return await handler(request)
            finally:
                self._in_flight.pop(id(request), None)

        return gated
