"""The EventHubConsumer CRD applied again under an operator with ``-A``: kopf serves the
consumers once discovery lists them, also when discovery lists them later than the CRD's
events say.

kopf 1.45 scans discovery once for each event of a CRD of the operator's groups
(`observation.process_discovered_resource_event`), and serves what that scan finds. When the
CRD is applied again while the machine is busy, every such scan can come back without the
resource: kopf warns ``Unresolved resources cannot be served`` once per event, no later event
of the CRD comes, and the operator served nothing until it was restarted. Replayed in 1 run of
8 of `tests/realkube/wire/test_crds_deleted.py` with the CPUs kept busy (and once in a clean
CI run): the scans of the CRD's three events all missed it, while the consumer created just
after them was taken by the API server. A client of its own, asking discovery at each
``Established`` event, found the resource listed every time (40 of 40, busy or not), so where
the lag is was not pinned down; scanning again covers it wherever it is.

`install` scans the group again, after waits that add up to `patience` (about 16 s), when an
event leaves the EventHubConsumer's CRD ``Established`` and kopf serving no EventHubConsumer.
It stops at the first scan that lists them and serves them as kopf's own scan would; when none
does, one WARNING says to restart the operator. A kopf that no longer scans in that function fails
`tests/handlers/test_kopf_rescans.py`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kopf._cogs.clients import scanning
from kopf._cogs.configs import configuration
from kopf._cogs.structs import bodies, references
from kopf._core.intents import registries
from kopf._core.reactor import observation

from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import kopfteardown

logger = logging.getLogger(__name__)

#: kopf's own processing of a CRD's event, wrapped by `install`.
STOCK_PROCESS = observation.process_discovered_resource_event
#: The waits before each further scan, in seconds: a few quick ones for a lag of moments, then
#: longer ones, as kopf's own retries do, bounded (`patience`).
RESCAN_DELAYS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def patience() -> float:
    """How long, at most, the further scans go on after one event."""
    return sum(RESCAN_DELAYS)


def awaited(raw_event: bodies.RawEvent, insights: references.Insights) -> bool:
    """Whether ``raw_event`` leaves the EventHubConsumer's CRD Established and still unserved."""
    crd: Any = raw_event.get("object") or {}
    spec, metadata = crd.get("spec") or {}, crd.get("metadata") or {}
    if raw_event.get("type") in (None, "DELETED") or metadata.get("deletionTimestamp"):
        return False
    if spec.get("group") != specs.GROUP or (spec.get("names") or {}).get("plural") != specs.PLURAL:
        return False
    conditions = (crd.get("status") or {}).get("conditions") or []
    established = any(
        c.get("type") == "Established" and c.get("status") == "True" for c in conditions
    )
    return established and not any(kopfteardown.ours(r) for r in insights.watched_resources)


async def process_discovered_resource_event(
    *,
    raw_event: bodies.RawEvent,
    settings: configuration.OperatorSettings,
    registry: registries.OperatorRegistry,
    insights: references.Insights,
    **kwargs: Any,
) -> None:
    await STOCK_PROCESS(
        raw_event=raw_event, settings=settings, registry=registry, insights=insights, **kwargs
    )
    if not awaited(raw_event, insights):
        return
    for scans, delay in enumerate(RESCAN_DELAYS, start=1):
        await asyncio.sleep(delay)
        resources = await scanning.scan_resources(
            groups={specs.GROUP}, settings=settings, logger=logger
        )
        if any(kopfteardown.ours(r) for r in resources):
            # As kopf's own processing serves what its scan found. That processing is not
            # called again instead: each scan that missed would repeat kopf's warning.
            async with insights.revised:
                observation.revise_resources(
                    resources=resources, insights=insights, registry=registry, group=specs.GROUP
                )
                await insights.backbone.fill(resources=resources)
                insights.revised.notify_all()
            logger.info(
                "Discovery lists %s %.2f s after their CRD's event (scan %d of %d more): "
                "serving them",
                specs.PLURAL,
                sum(RESCAN_DELAYS[:scans]),
                scans,
                len(RESCAN_DELAYS),
            )
            return
    logger.warning(
        "The CRD %s.%s is Established, but the API server's discovery did not list %s in "
        "%.0f s of scans: this operator serves no %s until it is restarted; restart it once "
        "`kubectl api-resources --api-group=%s` lists %s",
        specs.PLURAL,
        specs.GROUP,
        specs.PLURAL,
        patience(),
        specs.KIND,
        specs.GROUP,
        specs.PLURAL,
    )


def install() -> None:
    """Scan again for the EventHubConsumers after their CRD's event (before kopf starts)."""
    observation.process_discovered_resource_event = process_discovered_resource_event
