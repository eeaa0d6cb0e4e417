"""`caching.CachedKube`: a cycle's reads from the watch streams, its own writes seen at once.

kopf's indexes are played by plain dicts filled from the fake API's objects (`Watch.deliver`
is the watch catching up); the fake API's read methods fail the test when a read goes to it.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import caching, indexkeys, memories
from tests.handlers import test_cycles
from tests.support import fakes

NS, NAME = test_cycles.NS, test_cycles.NAME


class Watch:
    """kopf's three indexes over the fake API, delivered when the test says so."""

    def __init__(self, kube: fakes.FakeKube) -> None:
        self.kube = kube
        self.indexes: dict[str, dict[Any, list[dict[str, Any]]]] = {
            indexkeys.CONSUMERS: {},
            indexkeys.PODS: {},
            indexkeys.CONFIGMAPS: {},
        }
        self.deliver()

    def deliver(self) -> None:
        filed: dict[str, defaultdict[Any, list[dict[str, Any]]]] = {
            kind: defaultdict(list) for kind in self.indexes
        }
        for (kind, ns, name), body in self.kube.objects.items():
            labels = body["metadata"].get("labels") or {}
            if kind == "consumer":
                filed[indexkeys.CONSUMERS][indexkeys.consumer_key(ns, name)].append(
                    copy.deepcopy(body)
                )
            elif kind == "pod":
                copied = copy.deepcopy(body)
                for key in indexkeys.pod_keys(ns, labels, name):
                    filed[indexkeys.PODS][key].append(copied)
            elif kind == "configmap":
                copied = copy.deepcopy(body)
                for key in indexkeys.configmap_keys(ns, labels, name):
                    filed[indexkeys.CONFIGMAPS][key].append(copied)
        for kind, index in self.indexes.items():
            index.clear()
            index.update(filed[kind])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def kube() -> fakes.FakeKube:
    return test_cycles.make_kube()


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def watch(kube: fakes.FakeKube) -> Watch:
    return Watch(kube)


@pytest.fixture
def cache(kube: fakes.FakeKube, watch: Watch, clock: Clock) -> caching.CachedKube:
    cache = caching.CachedKube(kube, clock=clock)
    cache.attach(watch.indexes)
    return cache


def no_reads(kube: fakes.FakeKube, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every read that reaches the API."""
    reads: list[str] = []
    for method in ("get_consumer", "list_pods", "list_configmaps", "read_secret_key"):
        original = getattr(kube, method)

        async def read(
            *args: Any, _method: str = method, _original: Any = original, **kw: Any
        ) -> Any:
            reads.append(_method)
            return await _original(*args, **kw)

        monkeypatch.setattr(kube, method, read)
    return reads


async def cycle(
    cache: caching.CachedKube, hubs: fakes.FakeHubs, memory: memories.Memory, *, now: float
) -> int:
    result = await test_cycles.cycles.run_cycle(
        kube=cache, hubs=hubs, namespace=NS, name=NAME, memory=memory, now=test_cycles.at(now)
    )
    return result.writes


async def test_cycles_read_the_indexes_and_see_their_own_writes_before_the_watch(
    kube: fakes.FakeKube,
    hubs: fakes.FakeHubs,
    cache: caching.CachedKube,
    watch: Watch,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = no_reads(kube, monkeypatch)
    memory = memories.Memory()
    assert await cycle(cache, hubs, memory, now=0) > 0
    assert reads == ["read_secret_key", "read_secret_key"]  # Event Hubs and the store, once
    # The watch has delivered nothing yet: the writes' responses stand in for it.
    assert await cycle(cache, hubs, memory, now=1) == 0
    watch.deliver()
    assert await cycle(cache, hubs, memory, now=2) == 0
    assert reads == ["read_secret_key", "read_secret_key"]


async def test_a_newer_version_from_the_watch_wins_over_the_kept_write(
    kube: fakes.FakeKube, cache: caching.CachedKube, hubs: fakes.FakeHubs, watch: Watch
) -> None:
    memory = memories.Memory()
    await cycle(cache, hubs, memory, now=0)
    (name,) = [n for (k, _, n) in kube.objects if k == "configmap" and n.startswith("ehb-orders-a")]
    await kube.patch_configmap(
        namespace=NS,
        name=name,
        patch={"metadata": {"annotations": {"acked": "yes"}}},
        resource_version=None,
    )
    watch.deliver()
    maps = await cache.consumer_configmaps(namespace=NS, consumer=NAME)
    (mine,) = [m for m in maps if m["metadata"]["name"] == name]
    assert mine["metadata"]["annotations"]["acked"] == "yes"


async def test_a_configmap_deleted_by_the_operator_is_gone_before_the_watch_says_so(
    kube: fakes.FakeKube, cache: caching.CachedKube, hubs: fakes.FakeHubs, watch: Watch
) -> None:
    await cycle(cache, hubs, memories.Memory(), now=0)
    watch.deliver()
    maps = await cache.consumer_configmaps(namespace=NS, consumer=NAME)
    victim = maps[0]["metadata"]
    await cache.delete_configmap(namespace=NS, name=victim["name"], uid=victim["uid"])
    names = {
        m["metadata"]["name"] for m in await cache.consumer_configmaps(namespace=NS, consumer=NAME)
    }
    assert victim["name"] not in names
    assert len(names) == len(maps) - 1


async def test_after_a_relist_each_scope_is_listed_once_and_what_was_deleted_is_hidden(
    kube: fakes.FakeKube,
    cache: caching.CachedKube,
    watch: Watch,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    selector = specs.parse_spec(test_cycles.SPEC).selector
    cache.observed(indexkeys.PODS, None)  # the first listing
    cache.observed(indexkeys.PODS, "MODIFIED")
    del kube.objects["pod", NS, "a"]  # deleted while the watch was down: no DELETED event
    reads = no_reads(kube, monkeypatch)
    assert len(await cache.select_pods(namespace=NS, selector=selector)) == 2
    cache.observed(indexkeys.PODS, None)  # kopf lists again after a watch error
    cache.observed(indexkeys.PODS, None)
    pods = await cache.select_pods(namespace=NS, selector=selector)
    assert [p["metadata"]["name"] for p in pods] == ["b"]
    await cache.select_pods(namespace=NS, selector=selector)
    assert reads == ["list_pods"]


async def test_a_secret_is_kept_until_rejected_or_old(
    kube: fakes.FakeKube,
    cache: caching.CachedKube,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = no_reads(kube, monkeypatch)

    async def value() -> str:
        return await cache.read_secret_key(namespace=NS, name="eh", key="cs")

    first = await value()
    kube.add_secret(NS, "eh", {"cs": "rotated"})
    assert await value() == first
    cache.forget_secret(namespace=NS, name="eh")
    assert await value() == "rotated"
    kube.add_secret(NS, "eh", {"cs": "again"})
    clock.now += caching.SECRET_REFRESH_SECONDS
    assert await value() == "again"
    assert reads == ["read_secret_key"] * 3


async def test_a_rejected_connection_string_is_read_again_at_the_next_attempt(
    kube: fakes.FakeKube,
    cache: caching.CachedKube,
    hubs: fakes.FakeHubs,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = memories.Memory()
    await cycle(cache, hubs, memory, now=0)
    reads = no_reads(kube, monkeypatch)
    hubs.failure = errors.EventHubAuthenticationFailed("rejected")
    await cycle(cache, hubs, memory, now=1)
    assert reads == []  # the failing attempt used the kept value
    hubs.failure = None
    await cycle(cache, hubs, memory, now=1000)  # after the backoff
    assert reads == ["read_secret_key"]


async def test_without_indexes_every_read_goes_to_the_api(
    kube: fakes.FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = caching.CachedKube(kube)
    reads = no_reads(kube, monkeypatch)
    await cache.get_consumer(namespace=NS, name=NAME)
    assert reads == ["get_consumer"]
    assert cache.writes is kube.writes
