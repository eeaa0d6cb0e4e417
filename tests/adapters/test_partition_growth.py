"""What the partition cache offers the growth watch (`handlers.growth`): its hubs, one per
namespace, name and credentials however many consumers share them; one listing of a hub that
leaves the cache alone; and a longer list handed to a consumer, served fresh at its next read,
never a shorter one or another hub's. Event Hubs is faked at `hubclients.fetch_partition_ids`.
"""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import eventhubs, hubclients

FQN = "shop.servicebus.windows.net"
SECRET_KEY = "c2VjcmV0LWtleQ"  # what must never be shown
CONNECTION = f"Endpoint=sb://{FQN}/;SharedAccessKeyName=listen;SharedAccessKey={SECRET_KEY}"
FOUR = ("0", "1", "2", "3")
SIX = ("0", "1", "2", "3", "4", "5")


class Hub:
    """Event Hubs: the partitions of each hub by name, and every listing asked of it."""

    def __init__(self) -> None:
        self.ids: dict[str, tuple[str, ...]] = {}
        self.asked: list[str] = []
        self.failure: errors.EventHubBalancerError | None = None

    async def partition_ids(self, coordinates: eventhubs.Coordinates, **_: Any) -> list[str]:
        self.asked.append(coordinates.eventhub_name)
        if self.failure is not None:
            raise self.failure
        return list(self.ids.get(coordinates.eventhub_name, FOUR))


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    fake = Hub()
    monkeypatch.setattr(hubclients, "fetch_partition_ids", fake.partition_ids)
    return fake


async def read(
    hubs: eventhubs.EventHubs, consumer: str, name: str, *, now: float = 0.0
) -> tuple[tuple[str, ...], bool]:
    """A consumer's cycle reading its hub's partitions."""
    return await hubs.partitions(
        consumer=consumer,
        fully_qualified_namespace=FQN,
        eventhub_name=name,
        connection_string=CONNECTION,
        client_id=None,
        now=now,
    )


def the_hub(hubs: eventhubs.EventHubs, consumer: str) -> Any:
    [hub] = [h for h in hubs.hubs() if consumer in hubs.consumers(h)]
    return hub


async def test_consumers_of_one_hub_share_one_listing(hub: Hub) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "orders")
    await read(hubs, "shop/b", "orders")
    await read(hubs, "shop/c", "payments")
    assert len(hubs.hubs()) == 2
    orders = the_hub(hubs, "shop/a")
    assert hubs.consumers(orders) == {"shop/a": FOUR, "shop/b": FOUR}
    hub.asked.clear()
    hub.ids["orders"] = SIX
    assert await hubs.list_hub(orders) == SIX
    assert hub.asked == ["orders"]  # once for both consumers
    assert hubs.cached("shop/a") == FOUR  # a listing leaves the cache alone


async def test_a_grown_list_is_served_fresh_once_without_asking_again(hub: Hub) -> None:
    hubs = eventhubs.EventHubs(refresh_seconds=60.0)
    assert await read(hubs, "shop/a", "orders") == (FOUR, True)
    assert await read(hubs, "shop/a", "orders", now=1.0) == (FOUR, False)
    orders = the_hub(hubs, "shop/a")
    assert hubs.grow("shop/a", orders, SIX)
    hub.asked.clear()
    assert await read(hubs, "shop/a", "orders", now=2.0) == (SIX, True)
    assert await read(hubs, "shop/a", "orders", now=3.0) == (SIX, False)
    assert hub.asked == []
    hub.ids["orders"] = SIX
    assert await read(hubs, "shop/a", "orders", now=60.0) == (SIX, True)  # the refresh stays
    assert hub.asked == ["orders"]


async def test_a_list_never_goes_backwards_nor_takes_another_hubs(hub: Hub) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "orders")
    await read(hubs, "shop/c", "payments")
    orders, payments = the_hub(hubs, "shop/a"), the_hub(hubs, "shop/c")
    assert not hubs.grow("shop/a", orders, ("0", "1"))  # shorter
    assert not hubs.grow("shop/a", orders, ("3", "2", "1", "0"))  # as long
    assert not hubs.grow("shop/a", payments, SIX)  # another hub's listing
    assert not hubs.grow("shop/gone", orders, SIX)  # never cached
    assert hubs.cached("shop/a") == FOUR


async def test_a_failed_listing_raises_and_leaves_the_cache_alone(hub: Hub) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "orders")
    hub.failure = errors.EventHubUnreachable("no answer")
    with pytest.raises(errors.EventHubUnreachable):
        await hubs.list_hub(the_hub(hubs, "shop/a"))
    assert hubs.cached("shop/a") == FOUR


async def test_a_consumer_that_moved_or_was_forgotten_leaves_its_hub(hub: Hub) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "orders")
    await read(hubs, "shop/b", "orders")
    orders = the_hub(hubs, "shop/a")
    await read(hubs, "shop/a", "payments")  # its spec names another hub now
    assert hubs.consumers(orders) == {"shop/b": FOUR}
    assert not hubs.grow("shop/a", orders, SIX)
    hubs.forget("shop/b")  # its daemon stopped
    assert orders not in hubs.hubs()
    assert hubs.consumers(orders) == {}
    hub.asked.clear()
    assert await hubs.list_hub(orders) is None
    assert hub.asked == []
    hubs.forget("shop/a")
    assert hubs.hubs() == []


async def test_the_hubs_show_no_secret(hub: Hub) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "orders")
    assert SECRET_KEY not in repr(hubs.hubs())
    assert SECRET_KEY not in repr(hubs.cache._entries)  # the coordinates kept for the watch
