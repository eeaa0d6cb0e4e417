"""The partition list is read again at least every ``refresh_seconds`` of the cycle's clock,
which is the wall clock (``now``): a clock stepped back by NTP must not stop the refresh.
Event Hubs is faked at `hubclients.fetch_partition_ids` (`test_partition_growth.Hub`)."""

from __future__ import annotations

import pytest

from eventhub_balancer.adapters import eventhubs, hubclients
from tests.adapters.test_partition_growth import SIX, Hub, read

pytestmark = pytest.mark.asyncio


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    fake = Hub()
    monkeypatch.setattr(hubclients, "fetch_partition_ids", fake.partition_ids)
    return fake


async def test_a_young_list_is_served_and_an_old_one_read_again(hub: Hub) -> None:
    hubs = eventhubs.EventHubs(refresh_seconds=60.0)
    assert (await read(hubs, "shop/a", "orders", now=10_000.0))[1] is True
    hub.ids["orders"] = SIX
    assert await read(hubs, "shop/a", "orders", now=10_059.0) == (("0", "1", "2", "3"), False)
    assert await read(hubs, "shop/a", "orders", now=10_060.0) == (SIX, True)


async def test_a_wall_clock_stepped_back_reads_the_list_again_at_once(hub: Hub) -> None:
    hubs = eventhubs.EventHubs(refresh_seconds=60.0)
    await read(hubs, "shop/a", "orders", now=10_000.0)
    hub.asked.clear()
    hub.ids["orders"] = SIX
    # NTP steps the node's clock back an hour; the cycles go on every 10 s.
    stepped = 10_000.0 - 3600
    assert await read(hubs, "shop/a", "orders", now=stepped) == (SIX, True)
    assert hub.asked == ["orders"]
    # From there the list ages on the stepped clock as on any other.
    assert await read(hubs, "shop/a", "orders", now=stepped + 10) == (SIX, False)
    assert await read(hubs, "shop/a", "orders", now=stepped + 60) == (SIX, True)
    assert hub.asked == ["orders", "orders"]
