"""``ehb operator --pod-selector``: the pods outside it never become members, however a cycle
reads them.

kopf's pod watch asks the API server for the selected pods alone (`kopfwiring.configure`,
checked on the wire in ``tests/install/wire/test_recorded_operator.py``); here, the cache's
other ways in: a consumer's pods listed afresh, the periodic relisting, and a pod that a watch
delivers all the same.
"""

from __future__ import annotations

import datetime
from typing import Any

from eventhub_balancer.contracts import labelselectors
from eventhub_balancer.handlers.cache import caches, shelves
from tests.handlers.test_relisting import NS, RecordingKube

SINCE = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)
PART_OF, OURS = labelselectors.CONSUMER_POD_LABEL
SCOPE = labelselectors.parse_query(labelselectors.CONSUMER_PODS, field="--pod-selector")
ORDERS = labelselectors.Selector(match_labels={"app": "orders"})


def cluster() -> RecordingKube:
    """Two pods of the orders consumer, one of them without the label the operator watches,
    and a pod of another workload."""
    kube = RecordingKube()
    kube.add_pod(NS, "orders-0", labels={"app": "orders", PART_OF: OURS}, since=SINCE)
    kube.add_pod(NS, "orders-1", labels={"app": "orders"}, since=SINCE)
    kube.add_pod(NS, "web-0", labels={"app": "web"}, since=SINCE)
    return kube


def names(bodies: Any) -> set[str]:
    return {str(shelves.meta(b).get("name")) for b in bodies}


async def test_a_consumers_pods_are_listed_and_kept_within_the_operators_scope() -> None:
    kube = cluster()
    cache = caches.Cache(kube, pod_scope=SCOPE)
    cache.following.follow(namespace=NS, name="orders", selector=ORDERS)
    # No index yet: the pods are listed, asking for those in the scope alone.
    assert names(await cache.view.select_pods(namespace=NS, selector=ORDERS)) == {"orders-0"}
    assert kube.asked == [f"app=orders,{labelselectors.CONSUMER_PODS}"]
    # The periodic relisting asks for no more, and brings no other pod in.
    assert await cache.relisting.relist() == []
    assert kube.asked[-1] == f"{labelselectors.CONSUMER_PODS},app in (orders)"
    # A pod outside the scope that a watch delivers all the same is not taken in either.
    cache.watch.event(shelves.PODS, kube.objects["pod", NS, "orders-1"], "MODIFIED")
    assert names(await cache.view.select_pods(namespace=NS, selector=ORDERS)) == {"orders-0"}
    # A pod that loses the label leaves its consumer, as one relabelled away from its selector.
    kube.objects["pod", NS, "orders-0"]["metadata"]["labels"] = {"app": "orders"}
    kube.objects["pod", NS, "orders-0"]["metadata"]["resourceVersion"] = kube._bump()
    assert await cache.relisting.relist() == [(NS, "orders")]
    assert names(await cache.view.select_pods(namespace=NS, selector=ORDERS)) == set()


async def test_without_a_scope_every_pod_the_selector_matches_is_a_member() -> None:
    kube = cluster()
    cache = caches.Cache(kube)
    cache.following.follow(namespace=NS, name="orders", selector=ORDERS)
    assert names(await cache.view.select_pods(namespace=NS, selector=ORDERS)) == {
        "orders-0",
        "orders-1",
    }
    assert kube.asked == ["app=orders"]


#: A selector that names the label the scope requires: among the watched pods it selects what
#: ORDERS selects, but it is another consumer's selector.
ORDERS_LABELLED = labelselectors.Selector(match_labels={"app": "orders", PART_OF: OURS})


async def test_selectors_alike_within_the_scope_keep_their_own_rosters() -> None:
    kube = cluster()
    cache = caches.Cache(kube, pod_scope=SCOPE)
    cache.following.follow(namespace=NS, name="a", selector=ORDERS)
    cache.following.follow(namespace=NS, name="b", selector=ORDERS_LABELLED)
    await cache.view.select_pods(namespace=NS, selector=ORDERS)  # a's first read fills it
    asked = len(kube.asked)
    # a's decision needs its pods read afresh: its own roster is listed, not b's.
    cache.view.forget_pods(namespace=NS, name="a")
    assert names(await cache.view.select_pods(namespace=NS, selector=ORDERS)) == {"orders-0"}
    assert len(kube.asked) == asked + 1
    a = cache.following.roster(namespace=NS, name="a")
    assert a is not None
    assert shelves.PODS not in a.stale
    # b's daemon stops: a's pods are still served from its roster, with no LIST.
    cache.following.forget(namespace=NS, name="b")
    reads = cache.view.reads
    for _ in range(3):
        assert names(await cache.view.select_pods(namespace=NS, selector=ORDERS)) == {"orders-0"}
    assert cache.view.reads == reads
