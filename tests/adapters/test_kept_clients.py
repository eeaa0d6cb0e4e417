"""Event Hubs clients kept between cycles (`eventhubs.Clients`): one connection per hub and
credentials, reused; a failed one closed and replaced once; at most ``kept`` open; none leaked
when two calls for one hub overlap."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer.adapters import eventhubs, hubclients

pytestmark = pytest.mark.looptime


class Client:
    """A producer client that answers after ``seconds``, or fails as told."""

    def __init__(self, log: list[Client]) -> None:
        self.closed = False
        self.fail: BaseException | None = None
        self.seconds = 0.0
        log.append(self)

    async def get_partition_ids(self) -> list[str]:
        assert not self.closed, "a closed client was used"
        await asyncio.sleep(self.seconds)
        if self.fail is not None:
            raise self.fail
        return ["0", "1"]

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Client]:
    log: list[Client] = []
    monkeypatch.setattr(hubclients, "_open", lambda coordinates, **_: (Client(log), None))
    return log


def hub(name: str) -> eventhubs.Coordinates:
    return eventhubs.Coordinates(
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name=name,
        connection_string="Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=k",
    )


async def ids(clients: eventhubs.Clients, name: str) -> Any:
    return await eventhubs.fetch_partition_ids(hub(name), limit_seconds=10, clients=clients)


async def test_every_listing_of_a_hub_goes_over_one_client(made: list[Client]) -> None:
    clients = eventhubs.Clients()
    for _ in range(5):
        assert await ids(clients, "a") == ["0", "1"]
    assert await ids(clients, "b") == ["0", "1"]
    assert (clients.opened, len(clients)) == (2, 2)
    await clients.close()
    assert all(c.closed for c in made)


async def test_a_kept_client_that_fails_is_replaced_once(made: list[Client]) -> None:
    clients = eventhubs.Clients()
    await ids(clients, "a")
    made[0].fail = ConnectionResetError("the service closed the idle connection")
    assert await ids(clients, "a") == ["0", "1"]
    assert made[0].closed
    assert not made[1].closed
    assert len(clients) == 1


async def test_a_new_client_that_fails_fails_the_call_and_is_closed(made: list[Client]) -> None:
    clients = eventhubs.Clients()
    await ids(clients, "a")
    made[0].fail = ConnectionResetError("gone")
    original = hubclients._open

    def failing(coordinates: eventhubs.Coordinates, **how: Any) -> Any:
        client, credential = original(coordinates, **how)
        client.fail = ConnectionRefusedError("still gone")
        return client, credential

    hubclients._open = failing  # type: ignore[assignment]
    try:
        with pytest.raises(Exception, match="unreachable"):
            await ids(clients, "a")
    finally:
        hubclients._open = original  # type: ignore[assignment]
    assert len(made) == 2
    assert all(c.closed for c in made)
    assert len(clients) == 0


async def test_a_timeout_is_not_tried_again(made: list[Client]) -> None:
    clients = eventhubs.Clients()
    await ids(clients, "a")
    made[0].seconds = 60
    with pytest.raises(Exception, match="no answer within 10 s"):
        await ids(clients, "a")
    assert len(made) == 1
    assert made[0].closed
    assert asyncio.get_running_loop().time() == pytest.approx(10, abs=0.1)


async def test_at_most_kept_clients_stay_open_the_least_recent_closed(made: list[Client]) -> None:
    clients = eventhubs.Clients(kept=2)
    for name in ("a", "b", "a", "c"):
        await ids(clients, name)
    assert len(clients) == 2
    assert [c.closed for c in made] == [False, True, False]  # b was the least recent


async def test_two_calls_for_one_hub_at_once_leave_one_client_open(made: list[Client]) -> None:
    clients = eventhubs.Clients()
    await asyncio.gather(ids(clients, "a"), ids(clients, "a"))
    assert len(made) == 2
    assert len(clients) == 1
    assert sum(not c.closed for c in made) == 1
