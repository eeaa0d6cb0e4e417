"""`relisting`: the pods listed afresh every 10 s are those some consumer may select.

The relisting's bound on a late pod watch is tested end to end in `test_selfhealing.py`; here,
what one listing asks the API server for, and that asking for less still takes a deleted or
relabelled pod out of its roster.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import labelselectors, specs
from eventhub_balancer.handlers.cache import relisting, rosters, shelves
from tests.support import fakes

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
