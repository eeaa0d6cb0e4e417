"""A consumer deleted while the watch was away stays in kopf's peers index (kopf drops an
entry only on a DELETED event, and a re-list sends none): it must not refuse a newcomer at
its location for the life of the process. The consumer refused has its holder confirmed by
one read (`relisting.Ghosts`), and a holder the API server no longer has is left out."""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import memories
from eventhub_balancer.handlers.cache import caches, relisting, shelves
from tests.handlers import test_caching, test_conflicts
from tests.handlers.test_conflicts import NEWER, NS, OLDER, cycle
from tests.support import fakes, watches


def deleted_during_a_gap() -> tuple[fakes.FakeKube, watches.Watch, caches.Cache]:
    """`orders` and `orders-copy` listed by kopf; `orders` deleted while the watch was away,
    and kopf listed again: its peers index still holds `orders`, not deleting."""
    kube, watch, cache = test_conflicts.two_consumers()
    index = test_conflicts.peers_index(kube)  # as kopf filed both, before the gap
    kube._deleted("consumer", kube.objects.pop(("consumer", NS, OLDER)))
    watch.skip("consumer")  # the DELETED event is lost with the stream ...
    watch.relist("consumer")  # ... and the re-list lists what exists, and sends no DELETED
    cache.following.attach({**watch.indexes, shelves.PEERS: index})
    return kube, watch, cache


async def test_a_consumer_deleted_during_a_watch_gap_stops_refusing_the_newcomer() -> None:
    kube, _watch, cache = deleted_during_a_gap()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    woken: list[tuple[str, str]] = []
    cache.ghosts.wake = woken.append
    memory = memories.Memory()
    await cycle(cache, hubs, NEWER, memory, 0)
    assert kube.condition(NS, NEWER, "Conflict")["status"] == "True"  # the ghost's junior
    assert kube.assignment(NS) == {}
    assert await cache.ghosts.check() == [(NS, NEWER)]
    assert woken == [(NS, NEWER)]
    assert cache.ghosts.reads == 1
    assert [p.name for p in cache.view.peers()] == [NEWER]
    await cycle(cache, hubs, NEWER, memory, 5)
    assert kube.condition(NS, NEWER, "Conflict")["status"] == "False"
    assert sorted(kube.assignment(NS)) == ["a", "b"]
    assert await cache.ghosts.check() == []  # refused no more: nothing to confirm
    assert cache.ghosts.reads == 1


async def test_a_holder_that_exists_is_read_once_a_minute_and_keeps_its_location() -> None:
    kube, _watch, cache = test_conflicts.two_consumers()
    clock = cache.ghosts.clock
    assert isinstance(clock, test_caching.Clock)
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    await cycle(cache, hubs, OLDER, memories.Memory(), 0)
    await cycle(cache, hubs, NEWER, memories.Memory(), 1)
    assert kube.condition(NS, NEWER, "Conflict")["status"] == "True"
    for _ in range(5):
        assert await cache.ghosts.check() == []
    assert cache.ghosts.reads == 1  # confirmed: not read again within the minute
    clock.now += relisting.CONFIRM_SECONDS
    assert await cache.ghosts.check() == []
    assert cache.ghosts.reads == 2
    assert {p.name for p in cache.view.peers()} == {OLDER, NEWER}


async def test_a_holder_not_read_stays_a_holder() -> None:
    """A failed read proves nothing: the holder keeps its location, and is read again at the
    next turn."""
    kube, _watch, cache = deleted_during_a_gap()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    await cycle(cache, hubs, NEWER, memories.Memory(), 0)
    kube.fail("get_consumer", errors.ApiUnavailable("the API server is away"))
    assert await cache.ghosts.check() == []
    assert {p.name for p in cache.view.peers()} == {OLDER, NEWER}
    assert await cache.ghosts.check() == [(NS, NEWER)]


@pytest.mark.looptime
async def test_the_relisting_turn_confirms_the_holders() -> None:
    _kube, _watch, cache = deleted_during_a_gap()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    await cycle(cache, hubs, NEWER, memories.Memory(), 0)
    cache.relisting.start()
    try:
        await asyncio.sleep(relisting.RELIST_SECONDS + 1)
    finally:
        cache.relisting.stop()
    assert [p.name for p in cache.view.peers()] == [NEWER]
