"""The writing half of a cycle: each write only when it changes something, in a safe order.

The order of writes is what makes a crash at any point safe:
1. status.epochs first, when the plan gives out a higher epoch: epochs never go back even if
   every ConfigMap is lost right after;
2. the ConfigMaps that gain a partition, then those that lose one (a crash in between leaves a
   duplicate claim that the higher epoch resolves);
3. pod annotations and deletion of stale ConfigMaps, then Events and the rest of the status.

The writes within one step are independent and go out concurrently; a step starts only
once the step before it succeeded.

`assignments.derive_writes` puts 2 and 3 in that order; `cycles` calls these in the order above.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import assignments, ports

logger = logging.getLogger(__name__)

COMPONENT = "eventhub-balancer"


async def raise_epochs(
    *,
    kube: ports.KubePort,
    namespace: str,
    name: str,
    epochs: Mapping[str, int],
    current: Mapping[str, int],
) -> bool:
    """Write status.epochs if any epoch goes up; whether it was written."""
    if not any(epochs.get(p, 0) > current.get(p, 0) for p in epochs):
        return False
    await kube.patch_consumer_status(namespace=namespace, name=name, status={"epochs": epochs})
    return True


async def apply_writes(*, kube: ports.KubePort, namespace: str, planned: assignments.Writes) -> int:
    """ConfigMaps, then pod annotations and deletions; the number of writes.

    The writes of one step do not depend on each other and go out together (a hand-off waits
    for them); a step starts only once every write of the step before it succeeded, so the
    ConfigMaps that lose a partition are written only after all those that gain one.
    """
    gains = [w for w in planned.maps if w.gains]
    rest = [w for w in planned.maps if not w.gains]
    for step in (gains, rest):
        await _together(
            kube.create_configmap(namespace=namespace, body=w.body)
            if w.create
            else kube.patch_configmap(
                namespace=namespace, name=w.name, patch=w.body, resource_version=w.resource_version
            )
            for w in step
        )
    await _together(
        [
            *(
                kube.patch_pod_annotations(
                    namespace=namespace, name=a.pod, annotations=a.annotations
                )
                for a in planned.pods
            ),
            *(
                kube.delete_configmap(namespace=namespace, name=d.name, uid=d.uid or None)
                for d in planned.deletes
            ),
        ]
    )
    return len(planned.maps) + len(planned.pods) + len(planned.deletes)


async def _together(calls: Iterable[Awaitable[Any]]) -> None:
    """Run the calls concurrently; once all ended, raise the first failure (in call order)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def write_status(
    *,
    kube: ports.KubePort,
    namespace: str,
    name: str,
    body: specs.ConsumerBody,
    desired: Mapping[str, Any],
    previous: Mapping[str, Any] | None = None,
) -> int:
    """Patch only the top-level status fields that differ; the number of writes (0 or 1)."""
    base = previous if previous is not None else (body.get("status") or {})
    patch = assignments.status_patch(base, desired)
    if not patch:
        return 0
    await kube.patch_consumer_status(namespace=namespace, name=name, status=patch)
    return 1


async def post_event(
    kube: ports.KubePort, body: specs.ConsumerBody, event: assignments.Event, now: datetime.datetime
) -> None:
    """Post one Event about the EventHubConsumer in ``body``; a failure is only logged."""
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace", "default")
    stamp = specs.format_time(now)
    try:
        await kube.create_event(
            namespace=namespace,
            body={
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta.get('name', 'ehc')}.", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
                    "kind": specs.KIND,
                    "name": meta.get("name"),
                    "namespace": namespace,
                    "uid": meta.get("uid"),
                },
                "reason": event.reason,
                "message": event.message[:1024],
                "type": event.type,
                "source": {"component": COMPONENT},
                "reportingComponent": f"{specs.GROUP}/operator",
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            },
        )
    except (errors.TransientError, errors.ConfigurationError) as e:
        # An Event is for humans; losing one must not fail the cycle.
        logger.warning("could not post Event %s: %s", event.reason, e)
