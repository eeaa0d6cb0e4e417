"""Many consumers' calls to Event Hubs and the checkpoint stores take turns
(`eventhubs.CONCURRENT_CALLS`): never more in flight than the gate allows, and the wait for a
turn does not count against a call's timeout, so a thousand consumers starting together all
get their partitions instead of all timing out together. The turns are shared fairly between
tenants (`callgates`): one tenant's slow calls never take the turns another tenant needs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointlistings, eventhubs, hubclients
from eventhub_balancer.contracts import storeaddresses
from tests.support import fakes

pytestmark = pytest.mark.looptime

CONNECTION = "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"
BLOBS = (
    "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=a2V5;"
    "EndpointSuffix=core.windows.net"
)


class Hub:
    """Event Hubs that answers each call after ``seconds``, counting the calls in flight."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.in_flight = 0
        self.most = 0

    async def call(self, result: Any) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.seconds)
            return result
        finally:
            self.in_flight -= 1

    async def partition_ids(
        self, coordinates: eventhubs.Coordinates, *, limit_seconds: float, **_: Any
    ) -> list[str]:
        return list(await asyncio.wait_for(self.call(["0", "1"]), timeout=limit_seconds))

    async def sequences(
        self,
        coordinates: eventhubs.Coordinates,
        partitions: list[str],
        *,
        limit_seconds: float,
        **_: Any,
    ) -> dict[str, int]:
        return dict(await asyncio.wait_for(self.call({"0": 5}), timeout=limit_seconds))

    async def checkpoints(
        self, address: storeaddresses.StoreAddress, **_: Any
    ) -> dict[str, eventhubs.StoredCheckpoint]:
        stored = eventhubs.StoredCheckpoint(partition="0", epoch=2, sequence_number=4)
        return dict(await self.call({"0": stored}))


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    fake = Hub(seconds=4.0)
    monkeypatch.setattr(hubclients, "fetch_partition_ids", fake.partition_ids)
    monkeypatch.setattr(hubclients, "fetch_last_sequence_numbers", fake.sequences)
    monkeypatch.setattr(checkpointlistings, "read_checkpoints", fake.checkpoints)
    return fake


async def test_a_hundred_consumers_starting_together_all_get_their_partitions(hub: Hub) -> None:
    hubs = eventhubs.EventHubs(timeout=10.0, concurrent_calls=8)
    results = await asyncio.gather(
        *(
            hubs.partitions(
                consumer=f"c{i}",
                fully_qualified_namespace="shop.servicebus.windows.net",
                eventhub_name=f"hub-{i}",
                connection_string=CONNECTION,
                client_id=None,
                now=0.0,
            )
            for i in range(100)
        )
    )
    # One tenant (these name none): every turn but the quarter kept for other tenants.
    assert hub.most == 6
    # 100 calls of 4 s, 6 at a time: 68 s in all, far past the 10 s each may take
    assert asyncio.get_running_loop().time() >= 66
    assert all(ids == ("0", "1") and fresh for ids, fresh in results)


async def test_every_kind_of_call_takes_its_turn_from_the_one_gate(hub: Hub) -> None:
    hubs = eventhubs.EventHubs(timeout=10.0, concurrent_calls=3)
    common: dict[str, Any] = {
        "fully_qualified_namespace": "shop.servicebus.windows.net",
        "connection_string": CONNECTION,
        "client_id": None,
    }
    calls = [
        hubs.partitions(consumer="a", eventhub_name="a", now=0.0, **common),
        hubs.partitions(consumer="b", eventhub_name="b", now=0.0, **common),
        hubs.last_sequence_numbers(eventhub_name="a", partitions=["0"], **common),
        hubs.last_sequence_numbers(eventhub_name="b", partitions=["0"], **common),
        hubs.checkpoints(fakes.store_address(eventhub_name="a", connection_string=BLOBS)),
    ]
    results = await asyncio.gather(*calls)
    assert hub.most == 3
    assert results[2] == {"0": 5}
    assert results[4] == {"0": (2, 4)}


class Tenants(Hub):
    """Event Hubs where tenant A's namespace answers only at its timeout, B's at once."""

    async def partition_ids(
        self, coordinates: eventhubs.Coordinates, *, limit_seconds: float, **_: Any
    ) -> list[str]:
        if coordinates.fully_qualified_namespace.startswith("noisy"):
            await self.call(None)
            raise errors.EventHubUnreachable("no answer")
        return ["0", "1"]

    async def checkpoints(
        self, address: storeaddresses.StoreAddress, **_: Any
    ) -> dict[str, eventhubs.StoredCheckpoint]:
        return {"0": eventhubs.StoredCheckpoint(partition="0", epoch=2, sequence_number=4)}


async def test_a_tenant_whose_hubs_hang_leaves_another_tenant_its_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    noisy = Tenants(seconds=10.0)
    monkeypatch.setattr(hubclients, "fetch_partition_ids", noisy.partition_ids)
    monkeypatch.setattr(checkpointlistings, "read_checkpoints", noisy.checkpoints)
    hubs = eventhubs.EventHubs(timeout=10.0, concurrent_calls=8)
    hanging = [
        asyncio.ensure_future(
            hubs.partitions(
                consumer=f"noisy/c{i}",
                fully_qualified_namespace="noisy.servicebus.windows.net",
                eventhub_name=f"hub-{i}",
                connection_string=CONNECTION.replace("shop", "noisy"),
                client_id=None,
                now=0.0,
                namespace="noisy",
            )
        )
        for i in range(100)
    ]
    await asyncio.sleep(1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    stored = await hubs.checkpoints(
        fakes.store_address(connection_string=BLOBS, consumer_namespace="quiet")
    )
    assert stored == {"0": (2, 4)}
    assert loop.time() - started < 0.1  # not 100 calls of 10 s, 8 at a time: 120 s
    assert noisy.most == 6  # the noisy tenant left the quarter of the turns to others
    outcomes = await asyncio.gather(*hanging, return_exceptions=True)
    assert all(isinstance(e, errors.EventHubUnreachable) for e in outcomes)
