"""One AMQP connection for the management requests of a kept Event Hubs client.

azure-eventhub 5.15 opens a connection of its own for every management request (partition
ids, a partition's properties): its clients default to "separate connections", whose manager
hands a request no connection, so each one costs TCP, TLS, the AMQP open and SASL before its
session, token and link. The operator keeps its clients between cycles (`hubclients`), but
that kept no connection: its growth watch lists each hub up to four times a second and its
backlog reads take 20 partition ends a second, each opening a connection. At 300 consumers,
steady, those requests were 72 % of what the operator's event loop ran.

Here a kept client's requests share one connection (`share`), one request at a time, and
one management client on it: the first request opens the connection, its session, its token
(CBS) and its ``$management`` link, and leaves them open; each request after it sends only
its request and reads its answer on them. Before, the session, the token exchange and the
link were opened and closed again for every request, and were most of what the operator's
loop ran while steady. A request made while another one holds the connection waits for its
turn (a request on the kept client is one round trip; a connection of its own, eight), up to
`TURN_SECONDS`; after that the SDK opens one for it, as it always did. So the reads of a hub's
ends, up to 16 side by side, go over the kept connection one after another, and no two
sessions ever share it at once (two at once hung against the local emulator; the SDK's reads
of one connection from two requests at once are not safe either).

A connection idle for `REUSE_SECONDS`, or no longer open, is replaced: Event Hubs closes
connections nobody talks on, and a request on one it closed fails (the kept client is then
replaced once, `keptclients`). The management client goes with it, with a request that got
no answer on it, and after `CLIENT_SECONDS` in any case, so that its token and link are
renewed however busy it is (its token is refreshed on the way too, as the SDK does before
every request).

The SDK's management client, when it closes, ends its session and only then detaches its
``$management`` links, on the ended channel: a protocol error that makes the service close
the connection. Harmless on a connection of its own, closed next; so on every management
client this module's transport detaches those links first (`_KeptManagement`).

These are private SDK names, like those `amqphandshakes` wraps (pinned and listed as it
says): where they are missing nothing is done, and every request opens its own connection,
as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

#: A connection unused for this long is replaced rather than reused: nothing talks on a kept
#: connection between requests, and Event Hubs closes one that stays silent past its idle
#: timeout (a minute or more).
REUSE_SECONDS = 30.0
#: A management client kept open on the kept connection is opened anew after this long, however
#: busy: its session, token and link are renewed well within a token's lifetime (an hour).
CLIENT_SECONDS = 600.0
#: A request waits this long at most for the kept connection while another request holds it.
TURN_SECONDS = 5.0


def share(client: Any, *, clock: Callable[[], float] = time.monotonic) -> KeptConnection | None:
    """The management requests of the SDK client ``client`` share one connection, and one
    management client on it, one request at a time; the manager put in place, or None where
    the SDK lacks what this needs."""
    transport = getattr(client, "_amqp_transport", None)
    if (
        transport is None
        or not callable(getattr(transport, "create_mgmt_client", None))
        or not all(hasattr(client, n) for n in ("_conn_manager_async", "_address", "_config"))
    ):
        return None
    kept = KeptConnection(client, transport=transport, clock=clock)
    client._conn_manager_async = kept
    client._amqp_transport = _KeptManagement(transport, kept)
    return kept


class KeptConnection:
    """The SDK's connection manager (``get_connection``, ``reset_connection_if_broken``,
    ``close_connection``) over one connection, lent to one request at a time, with the
    management client kept open on it (`client`)."""

    def __init__(self, client: Any, *, transport: Any, clock: Callable[[], float]) -> None:
        self._client = client
        #: The SDK's transport, which makes its own management clients (`_KeptManagement`
        #: wraps it).
        self._transport = transport
        self.clock = clock
        #: Held while the lend is looked at or changed; requests wait on it for their turn.
        self._turn = asyncio.Condition()
        #: How long a request waits for the connection another one holds, before the SDK
        #: opens one for it: a request on it takes a round trip, a connection of its own eight.
        self.turn_seconds = TURN_SECONDS
        self.connection: Any = None
        self._lent = False
        self._returned = 0.0
        #: The management client kept open on `connection`, and when it was opened.
        self.client: Any = None
        self._client_opened = 0.0
        #: connections this manager opened, requests it lent one to, management clients it
        #: kept, and requests that waited `turn_seconds` in vain (for the tests)
        self.opened = 0
        self.lent = 0
        self.clients_kept = 0
        self.waited_out = 0

    async def get_connection(self, *, endpoint: str, auth: Any) -> Any:
        """The kept connection for this request (opened or replaced first if need be), once
        no other request holds it; None when another one still holds it after
        `turn_seconds`: the SDK then opens one for this request."""
        # One turn of the loop first: a close of the socket that has arrived is taken in.
        await asyncio.sleep(0)
        async with self._turn:
            if self._lent:
                try:
                    async with asyncio.timeout(self.turn_seconds):
                        await self._turn.wait_for(lambda: not self._lent)
                except TimeoutError:
                    self.waited_out += 1
                    return None
            if self.connection is not None and (
                not _is_open(self.connection) or self.clock() - self._returned >= REUSE_SECONDS
            ):
                await self._drop()
            if self.connection is None:
                self.connection = await self._open(auth)
                self.opened += 1
            self._lent = True
            self.lent += 1
            return self.connection

    def kept_client(self, connection: Any) -> Any:
        """The management client kept open on ``connection``, when it is the kept connection
        and the client is still open on it and younger than `CLIENT_SECONDS`; else None."""
        client = self.client
        if (
            client is None
            or connection is None
            or connection is not self.connection
            or getattr(client, "_session", None) is None
            or getattr(client, "_connection", None) is not connection
            or self.clock() - self._client_opened >= CLIENT_SECONDS
        ):
            return None
        return client

    def keep_client(self, client: Any) -> None:
        """``client`` was opened on the kept connection: it stays open for the next request."""
        self.client = client
        self._client_opened = self.clock()
        self.clients_kept += 1

    async def close_client(self) -> None:
        """The kept management client closes (links first); the connection stays."""
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await _close_links_first(client)

    async def returned(self, connection: Any) -> None:
        """A management client that held ``connection`` closed: the next request's turn."""
        if connection is not None and connection is self.connection:
            async with self._turn:
                self._lent = False
                self._returned = self.clock()
                self._turn.notify()

    async def reset_connection_if_broken(self) -> None:
        async with self._turn:
            if self.connection is not None and not _is_open(self.connection):
                await self._drop()

    async def close_connection(self) -> None:
        async with self._turn:
            await self._drop()

    async def _open(self, auth: Any) -> Any:
        # A management client of the SDK's own making opens it, with everything the SDK opens
        # one with (TLS context, endpoint, SASL), and is then told it is not its own to close.
        # That client, its session and token open, is the one kept for the requests.
        client = self._client
        opener = self._transport.create_mgmt_client(
            client._address, mgmt_auth=auth, config=client._config
        )
        try:
            await opener.open_async()
        except BaseException:
            with contextlib.suppress(Exception):
                await opener.close_async()
            raise
        opener._external_connection = True
        self.keep_client(opener)
        return opener._connection

    async def _drop(self) -> None:
        connection, self.connection = self.connection, None
        # Closing the connection ends the kept client's session and links with it.
        self.client = None
        self._lent = False
        self._turn.notify_all()  # whoever waits for it opens the next one
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()


class _KeptManagement:
    """The client's AMQP transport, whose management clients are `_ManagementClient`: kept
    open on the kept connection, and detaching their ``$management`` links before their
    session ends."""

    def __init__(self, transport: Any, kept: KeptConnection) -> None:
        self._transport = transport
        self._kept = kept

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def create_mgmt_client(self, *args: Any, **kwargs: Any) -> _ManagementClient:
        transport = self._transport
        return _ManagementClient(
            lambda: transport.create_mgmt_client(*args, **kwargs), kept=self._kept
        )


class _ManagementClient:
    """The management client of one request, as the SDK uses it (``open_async``,
    ``client_ready_async``, ``mgmt_request_async``, ``close_async``): on the kept connection,
    the management client kept open there, else one of its own, made as the SDK makes it.

    Made before the request is lent a connection, so which one it is is settled when it is
    opened. On the kept connection, a client that got its answer stays open for the next
    request; one that did not is closed, as every other one is, and gives the connection back.
    """

    def __init__(self, make: Callable[[], Any], *, kept: KeptConnection) -> None:
        self._make = make
        self._kept = kept
        self._client: Any = None
        self._answered = False

    def __getattr__(self, name: str) -> Any:
        client = self.__dict__.get("_client")
        if client is None:
            raise AttributeError(name)
        return getattr(client, name)

    async def open_async(self, connection: Any = None) -> None:
        kept = self._kept
        on_kept = connection is not None and connection is kept.connection
        if on_kept:
            self._client = kept.kept_client(connection)
            if self._client is not None:
                return
            await kept.close_client()  # too old, or gone with a request that failed on it
        self._client = self._make()
        await self._client.open_async(connection=connection)
        if on_kept:
            kept.keep_client(self._client)

    async def mgmt_request_async(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self._client.mgmt_request_async(*args, **kwargs)
        self._answered = True
        return answer

    async def close_async(self) -> None:
        client, self._client = self._client, None
        kept = self._kept
        if client is None:
            return
        connection = getattr(client, "_connection", None)
        try:
            if client is kept.client:
                if self._answered:
                    return  # open for the next request
                kept.client = None
            await _close_links_first(client)
        finally:
            await kept.returned(connection)


async def _close_links_first(client: Any) -> None:
    """Close the SDK management client ``client``, its ``$management`` links detached before
    its session ends (the SDK does it the other way round)."""
    operations = getattr(client, "_mgmt_links", None)
    if isinstance(operations, dict):
        for operation in list(operations.values()):
            with contextlib.suppress(Exception):
                await operation.close()
        operations.clear()
    await client.close_async()


def _is_open(connection: Any) -> bool:
    """Whether ``connection`` is open, as far as can be told without a round trip: its AMQP
    state says so, and its socket has not been closed under it. A request on a connection
    whose peer went away waits its whole timeout (the SDK's reads of a closed stream do not
    fail), so the socket's end, which the event loop sees as soon as it arrives, is looked at
    too."""
    state = getattr(connection, "state", None)
    if getattr(state, "name", None) != "OPENED":
        return False
    transport = getattr(connection, "_transport", None)
    for _ in range(3):  # the SASL transport wraps the socket's
        reader = getattr(transport, "reader", None)
        if reader is not None:
            writer = getattr(transport, "writer", None)
            # ``_eof``: the peer's end arrived, with frames still unread before it (asyncio's
            # own flag; ``at_eof`` waits for the buffer to be read).
            ended = reader.at_eof() or bool(getattr(reader, "_eof", False))
            return not ended and not (writer is not None and writer.is_closing())
        transport = getattr(transport, "_transport", None)
    return True
