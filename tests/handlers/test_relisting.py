"""`relisting`: the pods listed afresh every 10 s are those some consumer may select.

The relisting's bound on a late pod watch is tested end to end in `test_selfhealing.py`; here,
what one listing asks the API server for, that asking for less still takes a deleted or
relabelled pod out of its roster, and that a listing's answer goes only to the rosters it was
asked for: not to a roster that started, or changed its selector, while it was in flight.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import labelselectors, specs
from eventhub_balancer.handlers.cache import caches, relisting, rosters, shelves
from tests.handlers import test_caching, test_cycles
from tests.support import fakes, watches

NS = "shop"
SINCE = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)


class RecordingKube(fakes.FakeKube):
    """The in-memory API, recording each listing's selector and what it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []
        self.answered: list[set[str]] = []

    async def list_selected_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> listings.Listing:
        self.asked.append(selector.to_query())
        listing = await super().list_selected_pods(namespace=namespace, selector=selector)
        self.answered.append({b["metadata"]["name"] for b in listing.items})
        return listing


def follow(kept: rosters.Rosters, kube: fakes.FakeKube, name: str, app: str) -> rosters.Roster:
    """A consumer selecting ``app``, its roster filled from what the API server has."""
    selector = labelselectors.Selector(match_labels={"app": app})
    roster = rosters.Roster(
        namespace=NS,
        name=name,
        selects=lambda b: selector.matches(shelves.meta(b).get("labels") or {}),
        labelled=lambda b: False,
        scope=selector.to_query(),
    )
    kept.add(roster, lookup=shelves.pod_lookup(NS, selector), label=name)
    for (kind, ns, _), body in list(kube.objects.items()):
        if kind == "pod" and ns == NS:
            kept.offer(roster, shelves.PODS, body)
    return roster


def names(roster: rosters.Roster) -> set[str]:
    return {str(shelves.meta(b).get("name")) for b in roster.items(shelves.PODS)}


async def test_a_namespace_shared_with_other_workloads_lists_only_its_consumers_pods() -> None:
    kube = RecordingKube()
    for pod, labels in {
        "orders-0": {"app": "orders"},
        "orders-1": {"app": "orders"},
        "billing-0": {"app": "billing", "tier": "1"},
        "web-0": {"app": "web"},
        "cron-0": {},
    }.items():
        kube.add_pod(NS, pod, labels=labels, since=SINCE)
    kept = rosters.Rosters()
    orders = follow(kept, kube, "orders", "orders")
    billing = follow(kept, kube, "billing", "billing")
    woken: list[Any] = []
    listing = relisting.Relisting(kube, kept, wake=woken.append)
    assert await listing.relist() == []
    assert kube.asked == ["app in (billing,orders)"]
    assert kube.answered == [{"orders-0", "orders-1", "billing-0"}]
    # Asking for less still shows a pod deleted, and one relabelled away, behind the watch.
    kube.remove_pod(NS, "orders-1")
    kube.objects["pod", NS, "billing-0"]["metadata"]["labels"] = {"app": "web"}
    kube.objects["pod", NS, "billing-0"]["metadata"]["resourceVersion"] = kube._bump()
    assert sorted(await listing.relist()) == [(NS, "billing"), (NS, "orders")]
    assert names(orders) == {"orders-0"}
    assert names(billing) == set()
    assert sorted(woken) == [(NS, "billing"), (NS, "orders")]


@pytest.mark.parametrize(
    ("lookups", "query"),
    [
        ([(NS, "app", "orders")], "app in (orders)"),
        ([(NS, "app", "b"), (NS, "app", "a"), (NS, "app", "b")], "app in (a,b)"),
        # A consumer without a selector holds no pods: it widens nothing.
        ([(NS, "app", "a"), None], "app in (a)"),
        # Selectors that require values of different keys, or no value at all
        # (matchExpressions only): every pod of the namespace.
        ([(NS, "app", "a"), (NS, "team", "t")], ""),
        ([(NS, "app", "a"), (NS,)], ""),
        ([None], ""),
        # So many consumers that the query would grow long: every pod.
        ([(NS, "app", f"c{i}") for i in range(relisting.MAX_COVERED + 1)], ""),
    ],
)
def test_the_covering_selector_matches_whatever_a_roster_may_select(
    lookups: list[Any], query: str
) -> None:
    assert relisting.covering(lookups).to_query() == query


class GatedKube(fakes.FakeKube):
    """The in-memory API; a pods LIST answers what the API server had when it was asked, once
    the test lets it go (``gate``)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def list_selected_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> listings.Listing:
        listing = await super().list_selected_pods(namespace=namespace, selector=selector)
        if self.gate is not None:
            self.entered.set()
            await self.gate.wait()
        return listing


class Listing:
    """The relisting's LIST, asked and held until `answer`."""

    def __init__(self, kube: GatedKube, cache: caches.Cache) -> None:
        self.kube, self.cache = kube, cache
        self.gate = asyncio.Event()
        self.task: asyncio.Task[list[Any]] | None = None

    async def ask(self) -> Listing:
        self.kube.gate, self.kube.entered = self.gate, asyncio.Event()
        self.task = asyncio.create_task(self.cache.relisting.relist())
        await asyncio.wait_for(self.kube.entered.wait(), 1.0)
        self.kube.gate = None  # the cycles' own reads are not held
        return self

    async def answer(self) -> None:
        assert self.task is not None
        self.gate.set()
        await asyncio.wait_for(self.task, 1.0)


def held(cache: caches.Cache, name: str) -> set[str]:
    roster = cache.following.roster(namespace=NS, name=name)
    assert roster is not None
    return names(roster)


PART_OF = {"app.kubernetes.io/part-of": "eventhub-balancer"}
SCOPE = labelselectors.Selector(match_labels=PART_OF)
ORDERS = labelselectors.Selector(match_labels={"app": "orders"})
BILLING = labelselectors.Selector(match_labels={"app": "billing"})


@pytest.mark.parametrize("scoped", [False, True])
async def test_a_consumer_that_starts_during_a_relisting_keeps_its_pods(scoped: bool) -> None:
    # The listing covers billing's pods only (`app in (billing)`): orders was not running
    # when it was asked. Taken as orders' listing, it would remove both of orders' pods.
    kube = GatedKube()
    labels = PART_OF if scoped else {}
    kube.add_pod(NS, "billing-0", labels={"app": "billing", **labels}, since=SINCE)
    for pod in ("orders-0", "orders-1"):
        kube.add_pod(NS, pod, labels={"app": "orders", **labels}, since=SINCE)
    cache = caches.Cache(kube, pod_scope=SCOPE if scoped else None)
    watches.Watch(kube, cache)
    cache.following.follow(namespace=NS, name="billing", selector=BILLING)
    listing = await Listing(kube, cache).ask()
    cache.following.follow(namespace=NS, name="orders", selector=ORDERS)
    assert held(cache, "orders") == {"orders-0", "orders-1"}
    await listing.answer()
    assert held(cache, "orders") == {"orders-0", "orders-1"}
    departures = cache.view.departures(namespace=NS, name="orders")
    assert not departures.gone("orders-0", seen_at=None)
    assert held(cache, "billing") == {"billing-0"}


async def test_a_pod_that_left_the_scope_while_its_consumer_changed_selector_stays_out() -> None:
    # The new selector gives the roster a new pod shelf, which was not waiting for the
    # listing: the listing's older body of orders-1 must not bring it back.
    kube = GatedKube()
    for pod in ("orders-0", "orders-1"):
        kube.add_pod(NS, pod, labels={"app": "orders", "tier": "a", **PART_OF}, since=SINCE)
    cache = caches.Cache(kube, pod_scope=SCOPE)
    watch = watches.Watch(kube, cache)
    cache.following.follow(namespace=NS, name="orders", selector=ORDERS)
    listing = await Listing(kube, cache).ask()
    narrower = labelselectors.Selector(match_labels={"app": "orders", "tier": "a"})
    cache.following.follow(namespace=NS, name="orders", selector=narrower)
    relabelled = kube.objects["pod", NS, "orders-1"]
    relabelled["metadata"]["labels"] = {"app": "orders", "tier": "a"}  # out of the scope
    kube._store("pod", NS, relabelled)
    watch.deliver("pod")
    assert held(cache, "orders") == {"orders-0"}
    await listing.answer()
    assert held(cache, "orders") == {"orders-0"}
    pods = await cache.view.select_pods(namespace=NS, selector=narrower)
    assert [p["metadata"]["name"] for p in pods] == ["orders-0"]


async def test_a_daemon_restarted_during_a_relisting_keeps_its_partitions_on_live_pods() -> None:
    # The consumer's daemon stops and starts again (kopf restarts it, or a peer pauses it)
    # while a listing asked for another consumer's pods is in flight: its pods a and b are
    # alive and unchanged, and must keep their partitions.
    kube = GatedKube()
    for (kind, ns, name), body in test_cycles.make_kube().objects.items():
        kube.objects[kind, ns, name] = body
    kube.add_pod(NS, "billing-0", labels={"app": "billing"}, since=test_cycles.T0)
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    clock = test_caching.Clock()
    replica = watches.Replica(kube, hubs, clock=clock)
    t = await test_caching.settle(replica, kube, clock, start=0)
    before = test_caching.owners(kube)
    assert set(before.values()) == {"a", "b"}
    replica.cache.following.follow(namespace=NS, name="billing", selector=BILLING)
    replica.cache.following.forget(namespace=NS, name=test_cycles.NAME)
    replica.memories.clear()
    listing = await Listing(kube, replica.cache).ask()
    await replica.cycle(NS, test_cycles.NAME, now=test_cycles.at(t))  # follows it again
    await listing.answer()
    await replica.cycle(NS, test_cycles.NAME, now=test_cycles.at(t + 1))
    test_caching.assert_safe(kube)
    assert test_caching.owners(kube) == before
