"""A kept Event Hubs client nobody needs any more is closed, with its credentials: the last
consumer of its hub and credentials deleted (`EventHubs.forget`), or its Secret rotated to
another key. Clients are faked at `hubclients._open` (`test_kept_clients.Client`), on fake
loop time (looptime)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer.adapters import blobs, checkpointing, eventhubs, hubclients
from tests.adapters.test_kept_clients import Client, hub, ids
from tests.support import fakes

pytestmark = pytest.mark.looptime
FQN = "shop.servicebus.windows.net"


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Client]:
    log: list[Client] = []
    monkeypatch.setattr(hubclients, "_open", lambda coordinates, **_: (Client(log), None))
    return log


async def read(hubs: eventhubs.EventHubs, consumer: str, key: str, *, now: float) -> Any:
    """A consumer's cycle, with the connection string its Secret holds now."""
    return await hubs.partitions(
        consumer=consumer,
        fully_qualified_namespace=FQN,
        eventhub_name="orders",
        connection_string=f"Endpoint=sb://{FQN}/;SharedAccessKeyName=l;SharedAccessKey={key}",
        client_id=None,
        now=now,
    )


async def test_the_rotated_out_keys_client_is_closed_at_the_first_read_with_the_new_one(
    made: list[Client],
) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "old-key", now=0.0)
    await read(hubs, "shop/a", "new-key", now=10.0)  # the Secret rotated: another hub key
    assert len(made) == 2
    assert made[0].closed, "the client of the rotated-out key is still open"
    assert not made[1].closed
    assert len(hubs.clients) == 1


async def test_a_deleted_consumers_client_is_closed(made: list[Client]) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "a-key", now=0.0)
    hubs.forget("shop/a")  # its daemon stopped: the consumer is deleted
    assert len(hubs.clients) == 0, "the deleted consumer's client (and its key) is still kept"
    await asyncio.sleep(0)  # the close under way
    assert made[0].closed


async def test_a_client_stays_while_another_consumer_uses_its_hub_and_key(
    made: list[Client],
) -> None:
    hubs = eventhubs.EventHubs()
    await read(hubs, "shop/a", "shared", now=0.0)
    await read(hubs, "shop/b", "shared", now=0.0)
    hubs.forget("shop/a")
    await read(hubs, "shop/b", "rotated", now=10.0)  # b leaves the old key: now unused
    assert [c.closed for c in made] == [True, False]
    hubs.forget("shop/b")
    await hubs.close()
    assert all(c.closed for c in made)


async def test_a_client_released_while_in_use_is_closed_when_its_request_ends(
    made: list[Client],
) -> None:
    clients = eventhubs.Clients()
    await ids(clients, "a")
    made[0].seconds = 5  # a listing (the growth watch's) in flight when the consumer goes
    listing = asyncio.create_task(ids(clients, "a"))
    await asyncio.sleep(1)
    assert clients.release(hub("a").key) is None  # nothing kept to close yet
    assert [c.closed for c in made] == [False]  # not under the request's feet
    assert await listing == ["0", "1"]
    assert [c.closed for c in made] == [True]
    assert len(clients) == 0


async def test_a_close_that_hangs_is_given_up_after_the_timeout(
    monkeypatch: pytest.MonkeyPatch, made: list[Client]
) -> None:
    clients = eventhubs.Clients()
    await ids(clients, "a")

    async def hanging() -> None:
        await asyncio.sleep(3600)  # the peer is gone and the AMQP close is never answered

    monkeypatch.setattr(made[0], "close", hanging)
    loop = asyncio.get_running_loop()
    start = loop.time()
    closing = clients.release(hub("a").key)
    assert closing is not None
    await closing
    assert loop.time() - start == pytest.approx(hubclients.TIMEOUT_SECONDS)
    assert len(clients) == 0


class Container:
    """A checkpoint container client: lists no blob, and says whether it was closed."""

    def __init__(self, log: list[Container]) -> None:
        self.closed = False
        log.append(self)


@pytest.fixture
def containers(monkeypatch: pytest.MonkeyPatch) -> list[Container]:
    log: list[Container] = []

    async def close(entry: Any) -> None:
        entry[0].closed = True

    async def listed(store: Any) -> list[Any]:
        assert not store.container.closed, "a closed container was used"
        return []

    monkeypatch.setattr(blobs, "build_container", lambda **_: (Container(log), None))
    monkeypatch.setattr(blobs, "close_container", close)
    monkeypatch.setattr(checkpointing.CheckpointStore, "list", listed)
    return log


async def probe(hubs: eventhubs.EventHubs, consumer: str, key: str) -> Any:
    """A consumer's checkpoint probe, with the connection string its Secret holds now."""
    return await hubs.checkpoints(
        fakes.store_address(
            connection_string=(
                "DefaultEndpointsProtocol=https;AccountName=shop;"
                f"AccountKey={key};EndpointSuffix=core.windows.net"
            ),
            consumer=consumer,
        )
    )


async def test_a_deleted_consumers_checkpoint_container_is_closed(
    containers: list[Container],
) -> None:
    hubs = eventhubs.EventHubs()
    await probe(hubs, "shop/a", "a-key")
    await probe(hubs, "shop/a", "a-key")
    assert len(containers) == 1
    hubs.forget("shop/a")  # its daemon stopped: the consumer is deleted
    assert len(hubs.containers) == 0, "the deleted consumer's container (and its key) is kept"
    await asyncio.sleep(0)  # the close under way
    assert containers[0].closed


async def test_a_rotated_out_keys_container_closes_once_nobody_uses_it(
    containers: list[Container],
) -> None:
    hubs = eventhubs.EventHubs()
    await probe(hubs, "shop/a", "shared")
    await probe(hubs, "shop/b", "shared")
    await probe(hubs, "shop/a", "rotated")  # b still lists over the old key
    await asyncio.sleep(0)
    assert [c.closed for c in containers] == [False, False]
    await probe(hubs, "shop/b", "rotated")  # now nobody does
    await asyncio.sleep(0)
    assert [c.closed for c in containers] == [True, False]
    assert len(hubs.containers) == 1
    await hubs.close()
    assert all(c.closed for c in containers)
