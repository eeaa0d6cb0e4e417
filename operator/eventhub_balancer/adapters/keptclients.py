"""Clients kept open between the operator's cycles, by what they connect to.

A cycle that lists a hub's partitions, reads its ends or lists its checkpoint blobs then uses
a client already built (its configuration, credentials and TLS context) instead of building
one. A checkpoint container's requests also go over the kept HTTP session, and an Event Hub's
management requests over one AMQP connection, session and link the client keeps
(`mgmtconnections`; the SDK alone opens each of them per request). At 1,000 consumers the
operator built three clients per consumer a minute, and building them was most of what its
cycles cost (docs/scale.md).

Bounded: at most ``kept`` clients, the least recently used closed first. A client nobody
needs any more (its consumers deleted, or their Secret rotated to another key) is closed when
its owner says so (`Kept.release`), so that its credentials and its connection do not stay
open for the operator's life. A client whose request fails is closed and dropped; a kept one
(whose connection the service may have closed while idle) is tried once more on a new client,
except after a timeout, which already took the request's time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

C = TypeVar("C")
T = TypeVar("T")


class Kept(Generic[C]):
    """Open clients by key (`keptclients`); ``close`` closes one."""

    def __init__(
        self, *, kept: int, close: Callable[[C], Awaitable[None]], close_seconds: float = 10.0
    ) -> None:
        self.kept = kept
        self._close = close
        #: the longest a released client's close is waited for (a dead peer must not hang it)
        self.close_seconds = close_seconds
        self._open: collections.OrderedDict[Hashable, C] = collections.OrderedDict()
        #: requests in flight per key: their client is out of ``_open`` until they end
        self._busy: dict[Hashable, int] = {}
        #: keys released while a request was in flight: its client is closed, not kept
        self._released: set[Hashable] = set()
        #: the closes `release` started, awaited by `close`
        self._closing: set[asyncio.Task[None]] = set()
        #: clients built, for the tests and the benchmark
        self.opened = 0

    def __len__(self) -> int:
        return len(self._open)

    async def call(
        self, key: Hashable, build: Callable[[], C], request: Callable[[C], Awaitable[T]]
    ) -> T:
        """``request`` on the kept client for ``key`` (built with ``build`` if none is)."""
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
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
                if key in self._released:  # every request in flight at the release
                    await self._close(client)
                else:
                    await self._keep(key, client)
                return result
        finally:
            self._busy[key] -= 1
            if not self._busy[key]:
                del self._busy[key]
                self._released.discard(key)

    async def _keep(self, key: Hashable, client: C) -> None:
        other = self._open.pop(key, None)
        self._open[key] = client
        if other is not None and other is not client:
            await self._close(other)  # two requests for one key at once built two
        while len(self._open) > self.kept:
            _key, oldest = self._open.popitem(last=False)
            await self._close(oldest)

    def release(self, key: Hashable) -> Awaitable[None] | None:
        """Stop keeping ``key``'s client: its close starts now (within ``close_seconds``),
        returned to await or to leave to finish (None: none was kept); one in use by a
        request in flight is closed when the request ends. The next call builds a new one."""
        if key in self._busy:
            self._released.add(key)
        client = self._open.pop(key, None)
        if client is None:
            return None
        task = asyncio.get_running_loop().create_task(self._close_within(client))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return task

    async def _close_within(self, client: C) -> None:
        # A close that does not end in time is abandoned: the client is no longer kept, and
        # its socket goes with it.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.close_seconds):
                await self._close(client)

    async def close(self) -> None:
        while self._open:
            _key, client = self._open.popitem()
            await self._close(client)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class Users:
    """Which consumer uses which kept client, by the client's key: the last one to leave a key
    (its consumer deleted, or its Secret rotated to other credentials) releases its client
    with ``release`` (a `Kept.release`; None: nothing is kept, nothing to release)."""

    def __init__(self, release: Callable[[Hashable], Awaitable[None] | None] | None) -> None:
        self._release = release
        self._key: dict[str, Hashable] = {}
        #: the users of each key, as an ordered set (first use first)
        self._users: dict[Hashable, dict[str, None]] = {}

    def keys(self) -> list[Hashable]:
        """Every key some consumer uses, once."""
        return list(self._users)

    def users(self, key: Hashable) -> tuple[str, ...]:
        """The consumers that use ``key``, first use first."""
        return tuple(self._users.get(key, ()))

    def use(self, consumer: str, key: Hashable) -> Awaitable[None] | None:
        """``consumer`` now uses ``key``'s client; the close of the one it left, if nobody
        else uses that (under way: await it to wait for it)."""
        before = self._key.get(consumer)
        self._key[consumer] = key
        self._users.setdefault(key, {})[consumer] = None
        return self._leave(consumer, before) if before is not None and before != key else None

    def forget(self, consumer: str) -> Awaitable[None] | None:
        """``consumer`` is gone: the close of its client, if nobody else uses it."""
        before = self._key.pop(consumer, None)
        return self._leave(consumer, before) if before is not None else None

    def _leave(self, consumer: str, key: Hashable) -> Awaitable[None] | None:
        users = self._users.get(key)
        if users is not None:
            users.pop(consumer, None)
            if users:
                return None
            del self._users[key]
        return self._release(key) if self._release is not None else None
