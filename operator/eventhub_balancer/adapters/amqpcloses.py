"""An AMQP client given up closes the connection it opened, however far its opening got.

azure-eventhub 5.15's aio AMQP client (``_pyamqp``'s ``AMQPClientAsync``: a receive link's
handler, a management request's client) opens its connection, then begins its session; its
``close_async`` returns at once when it has no session ("already closed"). So an opening cut
short before the session began (an unanswered handshake, cut by the link-open bound of
`linkrepairs.bound_opens` or by the bound of a partition's properties read) left its
connection open, and a close cut short by its own time-out (`receiving`'s close of a broken
link) did the same. The socket of such a connection stays registered with the event loop, so
it is neither closed nor collected: behind an Event Hubs that accepts connections but answers
nothing, a pod of three partitions held 33 such sockets after a minute, one more at every
reopen of every partition, for as long as the outage lasted, up to the pod's limit of open
files.

Here each client the SDK creates (through the hooks of `amqphandshakes`, which see every
one) gets a close that, once the SDK's own close has returned or been cut short, aborts the
socket of a connection it opened itself and that is still there. That connection never
finished opening, or is being given up: nothing on it is worth flushing. A connection the
client was lent (the operator's kept management connection, `mgmtconnections`) is its
owner's to close, and is left alone.

These are private SDK names, like those `amqphandshakes` wraps (pinned and listed as it
says): where they are missing nothing is done, and the SDK closes as it does on its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


def close_for_good(client: Any) -> None:
    """``client``'s ``close_async`` aborts, after the SDK's own close, the socket of the
    connection ``client`` opened itself when that socket is still open."""
    closing = getattr(client, "close_async", None)
    if callable(closing) and not isinstance(closing, _ClosingForGood):
        client.close_async = _ClosingForGood(client, closing)


class _ClosingForGood:
    """A client's ``close_async``, then the abort of the socket it left (`close_for_good`)."""

    def __init__(self, client: Any, closing: Callable[[], Awaitable[None]]) -> None:
        self.client = client
        self.closing = closing

    async def __call__(self) -> None:
        # Taken before the close, which forgets the connection when it closes it.
        connection = getattr(self.client, "_connection", None)
        try:
            await self.closing()
        finally:
            # Looked at after: a connection lent to the client is marked so when it is lent.
            if connection is not None and not getattr(self.client, "_external_connection", True):
                abort_socket(connection)


def abort_socket(connection: Any) -> bool:
    """Abort the socket of the ``_pyamqp`` aio ``connection`` if its transport still holds
    one (the SDK's own close lets go of it once closed); True when there was one."""
    transport = getattr(connection, "_transport", None)
    writer = getattr(transport, "writer", None)
    socket = getattr(writer, "transport", None)
    abort = getattr(socket, "abort", None)
    if not callable(abort):
        return False
    abort()
    return True
