"""kopf serves the EventHubConsumers of a CRD applied again once discovery lists them, also
when discovery lists them later than the CRD's events (`kopfrescans`).

kopf's processing of a CRD's event runs here as kopf's CRD watcher calls it, with discovery
faked: it lists the resource only from a given scan on. Fake time (looptime): the further
scans wait seconds each. The real deletion and re-application is replayed in
`tests/realkube/wire/test_crds_deleted.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import scanning
from kopf._cogs.structs import bodies, references
from kopf._core.intents import registries
from kopf._core.reactor import observation

from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import kopfrescans

pytestmark = pytest.mark.looptime

CONSUMERS = references.Resource(
    specs.GROUP,
    "v1alpha1",
    specs.PLURAL,
    namespaced=True,
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
)


def crd_event(
    kind: str = "MODIFIED", *, established: bool = True, group: str = specs.GROUP
) -> bodies.RawEvent:
    conditions = [{"type": "NamesAccepted", "status": "True"}]
    if established:
        conditions.append({"type": "Established", "status": "True"})
    crd = {
        "metadata": {"name": f"{specs.PLURAL}.{group}"},
        "spec": {"group": group, "names": {"plural": specs.PLURAL, "kind": specs.KIND}},
        "status": {"conditions": conditions},
    }
    return bodies.RawEvent(type=kind, object=crd)  # type: ignore[typeddict-item]


class Discovery:
    """Discovery that lists the consumers from scan number ``listed_from`` on (1 is kopf's)."""

    def __init__(self, listed_from: int | None) -> None:
        self.listed_from = listed_from
        self.scans: list[float] = []

    async def __call__(
        self, *, groups: Collection[str] | None = None, **_: Any
    ) -> Collection[references.Resource]:
        assert groups is not None  # never the whole of discovery
        assert len(groups) == 1
        self.scans.append(asyncio.get_running_loop().time())
        if self.listed_from is not None and len(self.scans) >= self.listed_from:
            return {CONSUMERS}
        return set()


@pytest.fixture
def registry() -> registries.OperatorRegistry:
    registry = registries.OperatorRegistry()

    @kopf.on.event(specs.GROUP, "v1alpha1", specs.PLURAL, registry=registry)
    def consumers(**_: Any) -> None:
        pass

    return registry


async def process(
    monkeypatch: pytest.MonkeyPatch,
    registry: registries.OperatorRegistry,
    event: bodies.RawEvent,
    discovery: Discovery,
    insights: references.Insights | None = None,
) -> references.Insights:
    """kopf's processing of ``event`` as its CRD watcher calls it, `kopfrescans` installed."""
    monkeypatch.setattr(scanning, "scan_resources", discovery)
    monkeypatch.setattr(observation, "process_discovered_resource_event", kopfrescans.STOCK_PROCESS)
    kopfrescans.install()
    insights = insights if insights is not None else references.Insights()
    await observation.process_discovered_resource_event(
        raw_event=event, settings=kopf.OperatorSettings(), registry=registry, insights=insights
    )
    return insights


async def test_the_consumers_are_served_once_discovery_lists_them(
    monkeypatch: pytest.MonkeyPatch,
    registry: registries.OperatorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    discovery = Discovery(listed_from=4)
    start = asyncio.get_running_loop().time()
    with caplog.at_level(logging.INFO, logger=kopfrescans.__name__):
        insights = await process(monkeypatch, registry, crd_event(), discovery)
    assert CONSUMERS in insights.watched_resources
    # kopf's scan, then one after each wait until the fourth lists them.
    assert [round(t - start, 2) for t in discovery.scans] == [0, 0.25, 0.75, 1.75]
    assert [r.message for r in caplog.records if r.name == kopfrescans.__name__] == [
        f"Discovery lists {specs.PLURAL} 1.75 s after their CRD's event (scan 3 of 6 more): "
        "serving them"
    ]


async def test_a_crd_listed_at_once_is_scanned_once(
    monkeypatch: pytest.MonkeyPatch, registry: registries.OperatorRegistry
) -> None:
    discovery = Discovery(listed_from=1)
    insights = await process(monkeypatch, registry, crd_event(), discovery)
    assert CONSUMERS in insights.watched_resources
    assert len(discovery.scans) == 1


@pytest.mark.parametrize(
    "event",
    [
        crd_event("ADDED", established=False),
        crd_event("DELETED"),
        crd_event(group="example.com"),
    ],
    ids=["not yet established", "deleted", "another group's CRD"],
)
async def test_an_event_that_serves_nothing_new_is_scanned_once(
    monkeypatch: pytest.MonkeyPatch,
    registry: registries.OperatorRegistry,
    event: bodies.RawEvent,
) -> None:
    discovery = Discovery(listed_from=None)
    await process(monkeypatch, registry, event, discovery)
    assert len(discovery.scans) == 1


async def test_discovery_that_never_lists_them_ends_in_one_warning(
    monkeypatch: pytest.MonkeyPatch,
    registry: registries.OperatorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    discovery = Discovery(listed_from=None)
    start = asyncio.get_running_loop().time()
    with caplog.at_level(logging.WARNING, logger=kopfrescans.__name__):
        insights = await process(monkeypatch, registry, crd_event(), discovery)
    assert CONSUMERS not in insights.watched_resources
    assert len(discovery.scans) == 1 + len(kopfrescans.RESCAN_DELAYS)
    assert asyncio.get_running_loop().time() - start == pytest.approx(kopfrescans.patience())
    assert [r.message for r in caplog.records if r.name == kopfrescans.__name__] == [
        f"The CRD {specs.PLURAL}.{specs.GROUP} is Established, but the API server's discovery "
        f"did not list {specs.PLURAL} in 16 s of scans: this operator serves no {specs.KIND} "
        "until it is restarted; restart it once `kubectl api-resources "
        f"--api-group={specs.GROUP}` lists {specs.PLURAL}"
    ]


def test_kopf_still_scans_there_and_its_crd_watcher_calls_it_by_name() -> None:
    """A kopf that processes CRD events elsewhere would never call the wrapper: this fails."""
    assert kopfrescans.STOCK_PROCESS.__module__ == observation.__name__
    assert "process_discovered_resource_event" in observation.resource_observer.__code__.co_names
