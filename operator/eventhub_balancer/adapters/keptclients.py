"""Clients kept open between the operator's cycles, by what they connect to.

A cycle that lists a hub's partitions, reads its ends or lists its checkpoint blobs then uses
a client already built (its configuration, credentials and TLS context) instead of building
one. A checkpoint container's requests also go over the kept HTTP session, and an Event Hub's
management requests over one AMQP connection, session and link the client keeps
(`mgmtconnections`; the SDK alone opens each of them per request). At 1,000 consumers the
operator built three clients per consumer a minute, and building them was most of what its
cycles cost (docs/scale.md).

Bounded: at most ``kept`` clients, the least recently used closed first; a consumer deleted or
changed leaves its client to age out. A client whose request fails is closed and dropped; a
kept one (whose connection the service may have closed while idle) is tried once more on a
new client, except after a timeout, which already took the request's time.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

C = TypeVar("C")
T = TypeVar("T")


class Kept(Generic[C]):
    """Open clients by key (`keptclients`); ``close`` closes one."""

    def __init__(self, *, kept: int, close: Callable[[C], Awaitable[None]]) -> None:
        self.kept = kept
        self._close = close
        self._open: collections.OrderedDict[Hashable, C] = collections.OrderedDict()
        #: clients built, for the tests and the benchmark
        self.opened = 0

    def __len__(self) -> int:
        return len(self._open)

    async def call(
        self, key: Hashable, build: Callable[[], C], request: Callable[[C], Awaitable[T]]
    ) -> T:
        """``request`` on the kept client for ``key`` (built with ``build`` if none is)."""
        while True:
            client = self._open.pop(key, None)
            reused = client is not None
            if client is None:
                client = build()
                self.opened += 1
            try:
                result = await request(client)
            except BaseException as e:
                await self._close(client)
                if reused and isinstance(e, Exception) and not isinstance(e, TimeoutError):
                    continue
                raise
            await self._keep(key, client)
            return result

    async def _keep(self, key: Hashable, client: C) -> None:
        other = self._open.pop(key, None)
        self._open[key] = client
        if other is not None and other is not client:
            await self._close(other)  # two requests for one key at once built two
        while len(self._open) > self.kept:
            _key, oldest = self._open.popitem(last=False)
            await self._close(oldest)

    async def close(self) -> None:
        while self._open:
            _key, client = self._open.popitem()
            await self._close(client)
