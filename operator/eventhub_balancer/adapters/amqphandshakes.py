"""AMQP handshakes at the pace their frames arrive, not one frame per 50 ms.

azure-eventhub 5.15 opens every AMQP client the same way: it sends what opens the
connection, the session, the token's exchange and the link, then loops ``while not await
client.client_ready_async(): await asyncio.sleep(0.05)``. Each readiness check reads at most
one frame (waiting for it up to the socket's timeout), and a handshake is about ten frames,
so every opening took about 0.5 s however fast the service answered:

- a receive link (``EventHubConsumer._open``): every partition a pod took up waited that long
  before its first event;
- a management call (``_management_request_async``: partition ids, partition properties),
  which the SDK opens a connection, a session, a token and a link for every time (the
  operator's kept clients keep one of each open, `mgmtconnections`, but open them anew when
  they are replaced): every listing of a hub's partitions, every backlog read of a
  partition's end, every ``latest`` start position.

Here the clients the SDK creates get a readiness check that reads up to `HANDSHAKE_READS`
frames back to back, so the SDK's loop ends at the frame that completes the handshake. The
checks are the SDK's own: nothing is skipped, only the sleeps between frames that had already
arrived. These are private SDK names, like ``_create_consumer`` in `receiving`
(the SDK is pinned to one minor in pyproject.toml, and docs/status.md lists every private
name the product uses, `tests/install/test_docs_pages.py` keeping that list whole): where
they are missing nothing is done, and the SDK opens at its own pace.

These hooks see every AMQP client the SDK creates for the product, so they also give each one
the close of `amqpcloses`, which closes the connection of an opening cut short.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from eventhub_balancer.adapters import amqpcloses

#: How many of the handshake's frames one readiness check of the SDK may read back to back
#: before it answers "not yet" and the SDK sleeps its 50 ms. A handshake is about ten frames
#: (open, begin, two CBS attaches, the token's put and answer, the link's attach and flow);
#: the cap keeps a peer that closed the socket (each read then returns at once) from
#: turning the SDK's poll into a busy loop.
HANDSHAKE_READS = 32

Ready = Callable[[], Awaitable[bool]]


def read_handshake_back_to_back(consumer: Any) -> None:
    """Each AMQP handler the SDK consumer ``consumer`` creates (``_create_handler``, called by
    its ``_open``) reads its handshake's frames back to back."""
    create = getattr(consumer, "_create_handler", None)
    if not callable(create):
        return

    def create_handler(auth: Any) -> None:
        create(auth)
        _hasten(getattr(consumer, "_handler", None))

    consumer._create_handler = create_handler


def quick_management(client: Any) -> None:
    """Each management client the SDK client ``client`` (a consumer or producer client)
    creates for a request reads its handshake's frames back to back. The client's AMQP
    transport (a class of static methods the SDK calls through ``client._amqp_transport``)
    is wrapped for this client alone."""
    transport = getattr(client, "_amqp_transport", None)
    if transport is None or isinstance(transport, _QuickManagement):
        return
    if not callable(getattr(transport, "create_mgmt_client", None)):
        return
    client._amqp_transport = _QuickManagement(transport)


class _QuickManagement:
    """The SDK's AMQP transport, but for the management clients it creates."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def create_mgmt_client(self, *args: Any, **kwargs: Any) -> Any:
        client = self._transport.create_mgmt_client(*args, **kwargs)
        _hasten(client)
        return client


def _hasten(client: Any) -> None:
    amqpcloses.close_for_good(client)
    ready = getattr(client, "client_ready_async", None)
    if ready is not None:
        client.client_ready_async = _reading_back_to_back(ready)


def _reading_back_to_back(ready: Ready) -> Ready:
    async def client_ready_async() -> bool:
        for _ in range(HANDSHAKE_READS):
            if await ready():
                return True
        return False

    return client_ready_async
