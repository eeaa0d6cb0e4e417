"""A hub listed by the growth watch after its last consumer left keeps no client.

The growth watch lists a hub with the coordinates of one of its consumers
(`partitionlists.PartitionCache.list_hub`), after waiting for a turn among the calls in
flight (`hubclients.CONCURRENT_CALLS`). The consumer may be forgotten during that wait (it
was deleted, or its Secret rotated to another key and its next listing released the hub's
client): the listing must then not build a client for the hub, which nobody would release
again, with the credentials it holds and its AMQP connection open for the operator's life.
Clients are faked at `hubclients._open` (`test_kept_clients.Client`), on fake loop time.
"""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer.adapters import eventhubs, hubclients
from tests.adapters.test_kept_clients import Client
from tests.adapters.test_released_clients import read

pytestmark = pytest.mark.looptime


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Client]:
    log: list[Client] = []
    monkeypatch.setattr(hubclients, "_open", lambda coordinates, **_: (Client(log), None))
    return log


async def test_a_hub_listed_after_its_last_consumer_left_keeps_no_client(
    made: list[Client],
) -> None:
    hubs = eventhubs.EventHubs(concurrent_calls=1)
    await read(hubs, "shop/a", "a-key", now=0.0)
    [hub] = hubs.hubs()
    async with hubs.gate.turn(None):  # every turn taken: the growth watch's listing waits for one
        listing = asyncio.create_task(hubs.list_hub(hub))
        await asyncio.sleep(1)
        hubs.forget("shop/a")  # its daemon stopped: the consumer is deleted
        await asyncio.sleep(0)
    assert await listing is None  # nobody to list it for any more
    await asyncio.sleep(0)
    assert len(hubs.clients) == 0, "a client for a hub nobody uses is kept, with its key"
    assert all(c.closed for c in made)


async def test_a_listing_queued_behind_a_key_rotation_keeps_no_client_for_the_old_key(
    made: list[Client],
) -> None:
    hubs = eventhubs.EventHubs(concurrent_calls=1)
    await read(hubs, "shop/a", "old-key", now=0.0)
    [old] = hubs.hubs()
    async with hubs.gate.turn(None):  # every turn taken: both wait for one, in this order
        rotated = asyncio.create_task(read(hubs, "shop/a", "new-key", now=10.0))
        await asyncio.sleep(1)
        listing = asyncio.create_task(hubs.list_hub(old))
        await asyncio.sleep(1)
    await rotated  # the cycle with the rotated Secret: the old key's client is released
    assert await listing is None  # the old key is nobody's any more
    await asyncio.sleep(0)
    assert len(hubs.clients) == 1, "a client with the rotated-out key is kept"
    assert [c.closed for c in made] == [True, False]
