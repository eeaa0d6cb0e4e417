"""`mgmtconnections`: a kept Event Hubs client's management requests share one connection,
and one management client (session, token, ``$management`` link) on it.

Against the Event Hubs emulator, with the operator's clients (`hubclients`); the clock of the
reuse bound is a fake one. `test_eventhubs_adapter.py` shows the kept clients' listings on one
connection and a connection the service closed replaced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.eventhub._pyamqp.aio import AMQPClientAsync
from azure.eventhub.aio._client_base_async import ClientBaseAsync
from azure.eventhub.exceptions import EventHubError

from eventhub_balancer.adapters import hubclients, mgmtconnections
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from tests.handlers.test_caching import Clock
from tests.support.fixtures.eventhubs import EventHubTarget


@dataclasses.dataclass(frozen=True)
class KeptClient:
    """A kept client, its connection manager, the manager's fake clock and the emulator."""

    client: Any
    kept: mgmtconnections.KeptConnection
    clock: Clock
    emulator: EventHubsEmulator


@pytest.fixture
async def kept_client(eventhubs_hub: EventHubTarget) -> AsyncIterator[KeptClient]:
    """A producer client as the operator keeps one, its connection kept on a fake clock;
    closed after the test."""
    emu: EventHubsEmulator = eventhubs_hub.emulator
    client, _credential = hubclients._open(
        hubclients.Coordinates(
            fully_qualified_namespace=emu.fully_qualified_namespace,
            eventhub_name=eventhubs_hub.name,
            connection_string=emu.connection_string(),
        ),
        keep_connection=True,
    )
    kept = client._conn_manager_async
    assert isinstance(kept, mgmtconnections.KeptConnection)
    clock = Clock()
    kept.clock = clock  # `share` gave it the monotonic clock
    try:
        yield KeptClient(client, kept, clock, emu)
    finally:
        await client.close()


async def test_a_connection_idle_past_the_reuse_bound_is_replaced(
    kept_client: KeptClient,
) -> None:
    client, kept, clock = kept_client.client, kept_client.kept, kept_client.clock
    for _ in range(3):
        assert await client.get_partition_ids() == ["0", "1", "2", "3"]
        clock.now += mgmtconnections.REUSE_SECONDS - 1
    assert (kept.opened, kept.lent) == (1, 3)
    first = kept.connection
    clock.now += mgmtconnections.REUSE_SECONDS  # nothing talked on it for that long
    assert await client.get_partition_ids() == ["0", "1", "2", "3"]
    assert (kept.opened, kept.lent) == (2, 4)
    assert kept.connection is not first
    assert first.state.name == "END"  # the idle one was closed, not left open
    await client.close()
    assert kept.connection is None  # closing the client closes its kept connection


async def test_a_request_waits_its_turn_for_the_connection_and_then_opens_its_own(
    kept_client: KeptClient,
) -> None:
    client, kept, emu = kept_client.client, kept_client.kept, kept_client.emulator
    assert await client.get_partition_ids() == ["0", "1", "2", "3"]
    accepted = emu.connections_accepted()
    # Requests side by side take their turns on the kept connection: no connection more.
    ends = await asyncio.gather(*(client.get_partition_properties(p) for p in "0123"))
    assert [e["id"] for e in ends] == ["0", "1", "2", "3"]
    assert emu.connections_accepted() == accepted
    assert (kept.opened, kept.lent, kept.waited_out) == (1, 5, 0)
    # Held past the turn's bound (a request hanging on it): the next request opens one of
    # its own, as the SDK always did, and is answered.
    kept.turn_seconds = 0.2
    lent = await kept.get_connection(endpoint="", auth=None)
    assert lent is kept.connection
    assert await client.get_partition_properties("0")
    assert kept.waited_out == 1
    assert emu.connections_accepted() == accepted + 1
    await kept.returned(lent)
    assert await kept.get_connection(endpoint="", auth=None) is lent
    await kept.returned(lent)
    assert kept.opened == 1


async def test_requests_share_one_management_link_until_one_gets_no_answer(
    kept_client: KeptClient,
) -> None:
    client, kept, emu = kept_client.client, kept_client.kept, kept_client.emulator
    links = emu.request_links_attached("management")
    for _ in range(5):
        assert await client.get_partition_ids() == ["0", "1", "2", "3"]
    assert await client.get_partition_properties("2")
    # One session, token and link for all six: before, each request attached its own.
    assert emu.request_links_attached("management") - links == 1
    assert (kept.opened, kept.clients_kept, kept.lent) == (1, 1, 6)
    # A request that gets no answer on the kept client fails (the operator's clients do not
    # retry: `keptclients`) and closes it; the next one opens a new one on the same
    # connection, and that one is kept.
    failing = kept.client
    assert failing is not None

    async def no_answer(*args: Any, **kwargs: Any) -> Any:
        raise TimeoutError("no answer")

    failing.mgmt_request_async = no_answer
    with pytest.raises(EventHubError, match="no answer"):
        await client.get_partition_ids()
    assert await client.get_partition_ids() == ["0", "1", "2", "3"]
    assert failing._session is None  # closed, not left open on the connection
    assert kept.client is not failing
    assert kept.client is not None
    assert (kept.opened, kept.clients_kept) == (1, 2)
    assert emu.request_links_attached("management") - links == 2


async def test_a_busy_management_client_is_renewed_after_its_age_bound(
    kept_client: KeptClient,
) -> None:
    client, kept, clock = kept_client.client, kept_client.kept, kept_client.clock
    assert await client.get_partition_ids() == ["0", "1", "2", "3"]
    first = kept.client
    # Busy: a request within every reuse bound, so the connection stays, for longer than a
    # management client is kept.
    step = mgmtconnections.REUSE_SECONDS - 1
    for _ in range(int(mgmtconnections.CLIENT_SECONDS // step) + 1):
        clock.now += step
        assert await client.get_partition_ids() == ["0", "1", "2", "3"]
    assert kept.opened == 1
    assert kept.clients_kept == 2
    assert kept.client is not first
    assert first._session is None  # the old one was closed, links first


def test_the_sdk_makes_management_requests_as_the_kept_connection_expects() -> None:
    """Each request asks the client's connection manager for a connection, opens its
    management client on it, and closes that client when done; a management client keeps its
    operations by node and leaves an external connection open when it closes."""
    request = inspect.getsource(ClientBaseAsync._management_request_async)
    assert "await self._conn_manager_async.get_connection(" in request
    assert "await mgmt_client.open_async(connection=conn)" in request
    assert "finally:\n                await mgmt_client.close_async()" in request
    close = inspect.getsource(AMQPClientAsync.close_async)
    assert "if not self._external_connection:" in close
    assert "self._mgmt_links" in inspect.getsource(AMQPClientAsync.mgmt_request_async)
    # A kept management client's token is looked at, and refreshed when due, before every
    # request: the request waits for the client to be ready, which completes its token.
    assert "while not await mgmt_client.client_ready_async():" in request
    assert "auth_complete_async()" in inspect.getsource(AMQPClientAsync.client_ready_async)
    assert "handle_token()" in inspect.getsource(AMQPClientAsync.auth_complete_async)
