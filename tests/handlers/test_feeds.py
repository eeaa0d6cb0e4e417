"""A cycle reads what changed: the watch's change feed, the reads by name, the kept fleet.

`caching.CachedKube` is told which pods and ConfigMaps changed for a consumer (as the event
handlers in `registering` and its own writes tell it); `observing.observe_pods` reads only
those by name and advances the fleet kept in `memories.Memory`. Whatever happens (pods come,
change, leave the selector or go; the operator writes and the watch delivers; a re-list; a
kept write given up; a read that fails), the fleet it keeps is the fleet a whole listing of
the same cache gives. kopf's indexes are plain dicts (`test_caching.Watch`), and each delivery
tells the feed the objects whose bodies changed, as kopf's events would.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import caching, indexkeys, memories, observing, registering
from eventhub_balancer.reconciling import fleets
from tests.handlers import test_caching, test_cycles
from tests.support import fakes

NS, NAME, T0 = test_cycles.NS, test_cycles.NAME, test_cycles.T0
KEY = (NS, NAME)


class Events:
    """kopf's watch over the fake API: a delivery refiles the indexes and tells the feed
    which pods and ConfigMaps changed, as `registering`'s event handlers do."""

    def __init__(self, kube: fakes.FakeKube, cache: caching.CachedKube) -> None:
        self.kube, self.cache = kube, cache
        self.watch = test_caching.Watch(kube)
        cache.attach(self.watch.indexes)
        self.seen = self.snapshot()

    def snapshot(self) -> dict[tuple[str, str, str], Any]:
        return {k: copy.deepcopy(v) for k, v in self.kube.objects.items()}

    def deliver(self) -> None:
        now = self.snapshot()
        self.watch.deliver()
        for key in self.seen.keys() | now.keys():
            if self.seen.get(key) == now.get(key):
                continue
            kind, namespace, name = key
            if kind == "pod":
                self.cache.feeds.note(KEY, kind=indexkeys.PODS, object_name=name)
            elif kind == "configmap":
                self.cache.feeds.note_all(namespace, kind=indexkeys.CONFIGMAPS, object_name=name)
            self.cache.touch(*KEY, told=True)
        self.seen = now


@pytest.fixture
def kube() -> fakes.FakeKube:
    return test_cycles.make_kube()


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


@pytest.fixture
def clock() -> test_caching.Clock:
    return test_caching.Clock()


@pytest.fixture
def cache(kube: fakes.FakeKube, clock: test_caching.Clock) -> caching.CachedKube:
    return caching.CachedKube(kube, clock=clock)


@pytest.fixture
def events(kube: fakes.FakeKube, cache: caching.CachedKube) -> Events:
    return Events(kube, cache)


class Reads:
    """What the cycles asked the cache: whole listings, and names read one by one."""

    def __init__(self, cache: caching.CachedKube, monkeypatch: pytest.MonkeyPatch) -> None:
        self.listings = 0
        self.by_name: list[str] = []
        select, by_name = cache.select_pods, cache.pods_by_name

        async def counted_select(**kwargs: Any) -> Any:
            self.listings += 1
            return await select(**kwargs)

        def counted_by_name(**kwargs: Any) -> Any:
            names = list(kwargs.pop("names"))
            self.by_name += names
            return by_name(names=names, **kwargs)

        monkeypatch.setattr(cache, "select_pods", counted_select)
        monkeypatch.setattr(cache, "pods_by_name", counted_by_name)


async def whole(cache: caching.CachedKube) -> fleets.Fleet:
    """The fleet a whole listing of the cache gives."""
    selector = specs.parse_spec(test_cycles.SPEC).selector
    pods = await cache.select_pods(namespace=NS, selector=selector)
    maps = await cache.consumer_configmaps(namespace=NS, consumer=NAME)
    return fleets.build(
        scope=fleets.scope_of(NS, NAME, selector),
        pods=pods,
        configmaps=maps,
        selector=selector,
        consumer=NAME,
    )


def same(a: fleets.Fleet | None, b: fleets.Fleet) -> None:
    assert a is not None
    assert a.states == b.states
    assert a.stored == b.stored
    assert (a.names, a.members, a.current, a.reporting) == (
        b.names,
        b.members,
        b.current,
        b.reporting,
    )
    assert (a.ready, a.notready, a.by_pod, a.label_sets) == (
        b.ready,
        b.notready,
        b.by_pod,
        b.label_sets,
    )


async def cycle(
    cache: caching.CachedKube, hubs: fakes.FakeHubs, memory: memories.Memory, *, now: float
) -> int:
    return await test_caching.cycle(cache, hubs, memory, now=now)


async def settled(
    cache: caching.CachedKube, hubs: fakes.FakeHubs, events: Events, *, cycles: int = 4
) -> memories.Memory:
    """A consumer's memory after a few cycles, each write delivered by the watch."""
    memory = memories.Memory()
    for second in range(cycles):
        await cycle(cache, hubs, memory, now=second)
        events.deliver()
    return memory


async def test_a_pod_event_among_many_reads_that_pod_alone(
    kube: fakes.FakeKube,
    hubs: fakes.FakeHubs,
    cache: caching.CachedKube,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for i in range(30):
        kube.add_pod(NS, f"p-{i}", labels={"app": "c"}, since=T0)
    events.deliver()
    memory = await settled(cache, hubs, events, cycles=6)
    reads = Reads(cache, monkeypatch)
    kube.set_ready(NS, "p-7", ready=False, since=test_cycles.at(6))
    events.deliver()
    await cycle(cache, hubs, memory, now=7)
    assert reads.listings == 0
    assert reads.by_name == ["p-7"]
    assert memory.fleet is not None
    assert memory.fleet.changed_pods == {"p-7"}
    same(memory.fleet, await whole(cache))


async def test_a_read_that_fails_after_taking_the_names_leaves_the_next_read_whole(
    kube: fakes.FakeKube,
    hubs: fakes.FakeHubs,
    cache: caching.CachedKube,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = await settled(cache, hubs, events)
    kube.set_ready(NS, "a", ready=False, since=test_cycles.at(4))
    events.deliver()
    by_name = cache.pods_by_name

    def failing(**kwargs: Any) -> Any:
        raise RuntimeError("the read failed")

    monkeypatch.setattr(cache, "pods_by_name", failing)
    with pytest.raises(RuntimeError):
        await cycle(cache, hubs, memory, now=5)
    assert memory.fleet is None
    monkeypatch.setattr(cache, "pods_by_name", by_name)
    reads = Reads(cache, monkeypatch)
    await cycle(cache, hubs, memory, now=6)
    assert reads.listings == 1  # the taken names are gone with the failure: read whole
    same(memory.fleet, await whole(cache))


async def test_an_event_the_feed_was_not_told_of_makes_the_next_read_whole(
    hubs: fakes.FakeHubs,
    cache: caching.CachedKube,
    events: Events,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = await settled(cache, hubs, events)
    reads = Reads(cache, monkeypatch)
    cache.touch(NS, NAME)  # a spec change, a deletion of another consumer: no name
    await observing.observe_pods(
        kube=cache, observation=await observe_consumer(cache, hubs, memory), memory=memory
    )
    assert reads.listings == 1


async def observe_consumer(
    cache: caching.CachedKube, hubs: fakes.FakeHubs, memory: memories.Memory
) -> Any:
    return await observing.observe_consumer(
        kube=cache, hubs=hubs, namespace=NS, name=NAME, memory=memory, wall=0.0
    )


def test_a_feed_is_dropped_with_its_consumer_and_bounded(cache: caching.CachedKube) -> None:
    assert cache.changed(namespace=NS, name=NAME) is None  # no indexes: no feed
    cache.attach({indexkeys.PODS: {}, indexkeys.CONFIGMAPS: {}, indexkeys.CONSUMERS: {}})
    assert cache.changed(namespace=NS, name=NAME) is None  # the first take reads whole
    cache.feeds.note(KEY, kind=indexkeys.PODS, object_name="a")
    taken = cache.changed(namespace=NS, name=NAME)
    assert taken is not None
    assert taken.of(indexkeys.PODS) == {"a"}
    for i in range(caching.feeds.MAX_FEED_NAMES + 1):
        cache.feeds.note(KEY, kind=indexkeys.PODS, object_name=f"p-{i}")
    assert cache.changed(namespace=NS, name=NAME) is None  # past the bound: read whole
    cache.forget(namespace=NS, name=NAME)
    assert len(cache.feeds) == 0


@pytest.mark.parametrize("seed", range(8))
async def test_through_random_events_the_kept_fleet_is_a_whole_listings(
    seed: int,
    kube: fakes.FakeKube,
    hubs: fakes.FakeHubs,
    cache: caching.CachedKube,
    events: Events,
    clock: test_caching.Clock,
) -> None:
    rng = random.Random(seed)
    memory = memories.Memory()
    names = [f"p-{i}" for i in range(8)]
    second = 0.0
    for _ in range(25):
        roll = rng.random()
        name = rng.choice(names)
        present = ("pod", NS, name) in kube.objects
        if roll < 0.25 and not present:
            kube.add_pod(NS, name, labels={"app": "c"}, since=T0)
        elif roll < 0.45 and present:
            kube.set_ready(NS, name, ready=rng.random() < 0.5, since=test_cycles.at(second))
        elif roll < 0.55 and present:
            kube.objects[("pod", NS, name)]["metadata"]["labels"] = {"app": "elsewhere"}
        elif roll < 0.65 and present:
            kube.remove_pod(NS, name)
        elif roll < 0.7:
            cache.observed(indexkeys.PODS, "MODIFIED")
            cache.observed(indexkeys.PODS, None)  # a re-list after a watch error
        elif roll < 0.75:
            clock.now += caching.PENDING_SECONDS + 1  # kept writes are given up
        if rng.random() < 0.7:
            events.deliver()
        second += 1.0
        observed = await observing.observe_pods(
            kube=cache, observation=await observe_consumer(cache, hubs, memory), memory=memory
        )
        same(observed.fleet, await whole(cache))
        await cycle(cache, hubs, memory, now=second)  # the operator writes; a delivery follows


def test_the_event_handlers_tell_the_feed_of_the_consumers_they_wake() -> None:
    """`registering.Operator.pod_changed` tells each consumer it wakes which pod changed; a
    wake that names nothing (a spec change) makes that consumer's next read whole."""
    kube = test_cycles.make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    operator = registering.Operator(kube=kube, hubs=hubs, clock=lambda: T0)
    operator.cache.attach({indexkeys.PODS: {}, indexkeys.CONFIGMAPS: {}, indexkeys.CONSUMERS: {}})
    operator.selectors[KEY] = specs.parse_spec(test_cycles.SPEC).selector
    other = (NS, "payments")
    operator.selectors[other] = specs.parse_spec(
        {**test_cycles.SPEC, "selector": {"matchLabels": {"app": "pay"}}}
    ).selector
    for consumer in (KEY, other):
        assert operator.cache.changed(namespace=consumer[0], name=consumer[1]) is None
    operator.pod_changed(namespace=NS, name="a", labels={"app": "c"})
    taken = operator.cache.changed(namespace=NS, name=NAME)
    assert taken is not None
    assert taken.of(indexkeys.PODS) == {"a"}
    mine = operator.cache.changed(namespace=NS, name="payments")
    assert mine is not None
    assert mine.of(indexkeys.PODS) == frozenset()
    operator.consumer_changed(KEY, generation=2)
    assert operator.cache.changed(namespace=NS, name=NAME) is None
