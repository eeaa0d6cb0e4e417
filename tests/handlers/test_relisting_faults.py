"""What the operator's log says of the relisting while the API server refuses it.

Every 10 s the operator lists each namespace's pods afresh, and its ConfigMaps every minute
(`relisting`). An API server that throttles (429, API Priority and Fairness) or is overloaded
(503) refuses those LISTs for as long as it lasts, and each refusal was one WARNING per
namespace and kind: 165 lines in five minutes for three namespaces, the cycles' own faults
(said once, `cyclefaults`) lost among them. Now the log says a namespace's refused listing
once when it starts, reminds of it at most every `cyclefaults.REMIND_SECONDS`, and says in one
line when it is listed again. On fake time, over the in-memory API.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import labelselectors
from eventhub_balancer.handlers import cyclefaults
from eventhub_balancer.handlers.cache import relisting, rosters, shelves
from tests.support import fakes

pytestmark = pytest.mark.looptime

SINCE = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)
NAMESPACES = ("shop", "billing", "search")
THROTTLED = errors.ApiUnavailable(
    "pods: API server answered 429 (Too many requests, please try again later.)"
)
#: How long the API server refuses, in the tests: five minutes (under the reminder's period).
REFUSING = 300.0


def follow(kept: rosters.Rosters, namespace: str) -> None:
    selector = labelselectors.Selector(match_labels={"app": "orders"})
    roster = rosters.Roster(
        namespace=namespace,
        name="orders",
        selects=lambda b: selector.matches(shelves.meta(b).get("labels") or {}),
        labelled=lambda b: False,
        scope=selector.to_query(),
    )
    kept.add(roster, lookup=shelves.pod_lookup(namespace, selector), label="orders")


def said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == relisting.logger.name and r.levelno == level
    ]


async def test_a_refused_relisting_is_said_once_per_namespace_and_its_end_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = fakes.FakeKube()
    kept = rosters.Rosters()
    for namespace in NAMESPACES:
        kube.add_pod(namespace, "orders-0", labels={"app": "orders"}, since=SINCE)
        follow(kept, namespace)
    woken: list[Any] = []
    listing = relisting.Relisting(kube, kept, wake=woken.append)
    turns = int(REFUSING / relisting.RELIST_SECONDS)
    # Refused at every turn: each namespace's pods, and its ConfigMaps from their first turn.
    kube.fail("list_pods", THROTTLED, times=turns * len(NAMESPACES))
    kube.fail("list_configmaps", THROTTLED, times=turns * len(NAMESPACES))
    with caplog.at_level(logging.DEBUG, logger=relisting.logger.name):
        listing.start()
        try:
            await asyncio.sleep(REFUSING + relisting.RELIST_SECONDS / 2)
            assert not kube._failures["list_pods"]  # the refusals were all met
            warned = said(caplog, logging.WARNING)
            # Once per namespace and kind, when the refusals started.
            assert len(warned) == 2 * len(NAMESPACES), warned
            for namespace in NAMESPACES:
                assert sum(f"pods in {namespace} " in line for line in warned) == 1
                assert sum(f"ConfigMaps in {namespace} " in line for line in warned) == 1
                assert all("429" in line for line in warned)
            # Listed again: said once per namespace and kind, with what it cost.
            await asyncio.sleep(relisting.CONFIGMAP_RELIST_SECONDS)
            ended = [line for line in said(caplog, logging.INFO) if "again after" in line]
            assert len(ended) == 2 * len(NAMESPACES), ended
            assert sum(line.startswith("pods in shop listed afresh again") for line in ended) == 1
            assert len(said(caplog, logging.WARNING)) == 2 * len(NAMESPACES)
        finally:
            listing.stop()


async def test_a_refusal_that_lasts_is_reminded_at_a_bounded_pace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = fakes.FakeKube()
    kept = rosters.Rosters()
    kube.add_pod("shop", "orders-0", labels={"app": "orders"}, since=SINCE)
    follow(kept, "shop")
    listing = relisting.Relisting(kube, kept, wake=lambda key: None)
    lasting = 3 * cyclefaults.REMIND_SECONDS
    kube.fail("list_pods", THROTTLED, times=int(lasting / relisting.RELIST_SECONDS))
    with caplog.at_level(logging.DEBUG, logger=relisting.logger.name):
        listing.start()
        try:
            await asyncio.sleep(lasting - relisting.RELIST_SECONDS / 2)
        finally:
            listing.stop()
    pods = [line for line in said(caplog, logging.WARNING) if line.startswith("pods in shop")]
    # The start, and a reminder at most every REMIND_SECONDS, with the attempts since.
    assert 2 <= len(pods) <= 3, pods
    assert "attempts over" in pods[-1], pods
