"""Cycles over the cache with two EventHubConsumers: the peers index, the refused one's
silence (no endless rewrites of each other's pods), and a selector the API would reject."""

from __future__ import annotations

import copy
from typing import Any

from eventhub_balancer.contracts import configmaps, specs, timestamps
from eventhub_balancer.handlers import cycles, kopfwiring, memories
from eventhub_balancer.handlers.cache import caches, serving, shelves
from tests.handlers import test_caching, test_cycles
from tests.support import fakes, watches

NS = test_cycles.NS
OLDER, NEWER = "orders", "orders-copy"


def peers_index(kube: fakes.FakeKube) -> dict[Any, list[Any]]:
    """The peers index as kopf files it: every consumer through `kopfwiring.peer_entry`."""
    index: dict[Any, list[Any]] = {}
    for (kind, ns, name), body in kube.objects.items():
        if kind == "consumer":
            for key, value in kopfwiring.peer_entry(ns, name, copy.deepcopy(body)).items():
                index.setdefault(key, []).append(value)
    return index


def two_consumers() -> tuple[fakes.FakeKube, watches.Watch, caches.Cache]:
    """`orders` (created first) and `orders-copy`, both selecting the pods ``app=c``."""
    kube = test_cycles.make_kube()
    kube.add_consumer(NS, NEWER, test_cycles.SPEC)
    for name, seconds in ((OLDER, 0), (NEWER, 60)):
        meta = kube.objects["consumer", NS, name]["metadata"]
        meta["creationTimestamp"] = timestamps.format_time(test_cycles.at(seconds))
    cache = caches.Cache(kube, clock=test_caching.Clock())
    watch = watches.Watch(kube, cache)
    cache.following.attach({**watch.indexes, shelves.PEERS: peers_index(kube)})
    return kube, watch, cache


async def cycle(
    cache: caches.Cache, hubs: fakes.FakeHubs, name: str, memory: memories.Memory, now: float
) -> cycles.Result:
    cache.following.follow(
        namespace=NS, name=name, selector=specs.parse_spec(test_cycles.SPEC).selector
    )
    return await cycles.run_cycle(
        kube=cache.view,
        hubs=hubs,
        namespace=NS,
        name=name,
        memory=memory,
        now=test_cycles.at(now),
        annotate_pods=True,
    )


def test_the_index_sums_up_each_consumer_once() -> None:
    body = {"metadata": {"uid": "u1", "creationTimestamp": "2024-05-01T12:00:00Z"}}
    [(key, peer)] = kopfwiring.peer_entry(NS, "x", {**body, "spec": test_cycles.SPEC}).items()
    assert key == shelves.peer_key(NS)
    assert (peer.namespace, peer.name, peer.uid) == (NS, "x", "u1")
    assert peer.selector is not None
    assert peer.selector.matches({"app": "c"})
    [(_, broken)] = kopfwiring.peer_entry(NS, "y", {**body, "spec": {}}).items()
    assert (broken.selector, broken.location) == (None, None)  # an invalid spec claims nothing


async def test_the_later_consumer_writes_nothing_and_nobody_rewrites_the_pods_forever() -> None:
    kube, watch, cache = two_consumers()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    older, newer = memories.Memory(), memories.Memory()
    assert (await cycle(cache, hubs, OLDER, older, 0)).writes > 0
    before = list(kube.calls)
    refused = await cycle(cache, hubs, NEWER, newer, 1)
    # Only its own status (and an Event): no ConfigMap, no pod annotation, no epochs.
    assert [c for c in kube.calls[len(before) :] if c[1] != "event"] == [("patch", "status", NEWER)]
    assert refused.decision.epochs is None
    assert kube.condition(NS, NEWER, "Conflict")["status"] == "True"
    assert f"{NS}/{OLDER}" in kube.condition(NS, NEWER, "Conflict")["message"]
    pods = {name: kube.objects["pod", NS, name]["metadata"] for name in ("a", "b")}
    assert {m["annotations"][configmaps.POD_ANNOTATION_CONSUMER] for m in pods.values()} == {OLDER}
    # Each wakes the other's pods no more: both steady, with no write at all.
    watch.deliver()
    cache.following.attach({**watch.indexes, shelves.PEERS: peers_index(kube)})
    calls = len(kube.calls)
    for now in (2, 3, 4):
        await cycle(cache, hubs, OLDER, older, now)
        await cycle(cache, hubs, NEWER, newer, now)
    assert kube.calls[calls:] == []


async def test_once_the_older_one_is_gone_the_later_one_takes_over() -> None:
    kube, watch, cache = two_consumers()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    await cycle(cache, hubs, NEWER, memories.Memory(), 0)
    assert kube.assignment(NS) == {}
    kube._deleted("consumer", kube.objects.pop(("consumer", NS, OLDER)))
    watch.deliver()
    cache.following.attach({**watch.indexes, shelves.PEERS: peers_index(kube)})
    await cycle(cache, hubs, NEWER, memories.Memory(), 5)
    assert kube.condition(NS, NEWER, "Conflict")["status"] == "False"
    assert sorted(kube.assignment(NS)) == ["a", "b"]


async def test_without_the_index_no_peer_is_known() -> None:
    kube = test_cycles.make_kube()
    cache = serving.CachedKube(kube)
    assert cache.peers() == ()


async def test_a_selector_the_api_would_reject_is_an_invalid_spec_through_a_cycle() -> None:
    kube = test_cycles.make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    kube.set_spec(NS, OLDER, {**test_cycles.SPEC, "selector": {"matchLabels": {"app": "a b"}}})
    result = await test_cycles.cycle(kube, hubs, memories.Memory(), now=0)
    assert result.decision.spec_error is not None
    assert hubs.listings == []
    assert kube.assignment(NS) == {}
    ready = kube.condition(NS, OLDER, "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.selector" in ready["message"]


async def test_the_peers_are_one_value_until_a_consumer_event_says_they_changed() -> None:
    """A cycle reads the peers without a pass over the index (at 1,000 consumers that pass,
    in every cycle, was an eighth of the operator's CPU); the CR event kopf filed in the
    index makes the next read see it."""
    kube, watch, cache = two_consumers()
    index = peers_index(kube)
    cache.following.attach({**watch.indexes, shelves.PEERS: index})
    first = cache.view.peers()
    assert {p.name for p in first} == {OLDER, NEWER}
    assert cache.view.peers() is first
    kube.add_consumer(NS, "third", test_cycles.SPEC)
    index.update(peers_index(kube))  # kopf files the event in its index first ...
    watch.deliver()  # ... then hands it to the event handler
    assert {p.name for p in cache.view.peers()} == {OLDER, NEWER, "third"}
