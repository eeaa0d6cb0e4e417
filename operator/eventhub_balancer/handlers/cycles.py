"""One reconcile cycle of one EventHubConsumer: observe, decide, apply.

A plain async function over two ports (`ports.KubePort`, `ports.HubPort`), so it runs and is
tested without kopf; the daemon in `registering` only decides *when* to call it. `observing`
reads, `reconciling.deciding` decides (pure), `writing` writes in the order that makes a crash
at any point safe. The checkpoint blobs are read only when the first decision asks for them,
and then the cycle decides again with them.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time

from eventhub_balancer.contracts import podstates
from eventhub_balancer.handlers import memories, metrics, observing, ports, writing
from eventhub_balancer.reconciling import deciding

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
    writes: int  # API writes made
    decision: deciding.Decision


async def run_cycle(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: memories.Memory,
    now: datetime.datetime,
    metrics: metrics.Metrics | None = None,
    annotate_pods: bool = False,
) -> Result:
    """Reconcile one EventHubConsumer once. Raises only transient Kubernetes API errors.

    ``annotate_pods``: also write each pod's partitions into an annotation on the Pod (for
    humans; it needs patch on pods, which the install grants only when it is switched on).
    """
    started, writes_before = time.monotonic(), dict(kube.writes)
    try:
        decision = await _decide(
            kube=kube,
            hubs=hubs,
            namespace=namespace,
            name=name,
            memory=memory,
            now=now,
            annotate_pods=annotate_pods,
        )
        writes = await writing.apply(kube=kube, namespace=namespace, name=name, decision=decision)
    finally:
        if metrics is not None:
            metrics.record_cycle(
                namespace=namespace,
                consumer=name,
                seconds=time.monotonic() - started,
                writes={k: n - writes_before.get(k, 0) for k, n in kube.writes.items()},
            )
    if metrics is not None and decision.figures is not None:
        metrics.record(namespace=namespace, consumer=name, values=decision.figures)
    for m in decision.moves:
        logger.info(
            "%s/%s: %s partition %s %s -> %s (epoch %d, %s)",
            namespace,
            name,
            m.kind,
            m.partition,
            m.source,
            m.target,
            m.epoch,
            m.reason,
        )
    return Result(writes=writes, decision=decision)


async def _decide(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: memories.Memory,
    now: datetime.datetime,
    annotate_pods: bool,
) -> deciding.Decision:
    """Observe and decide; read the checkpoint blobs and decide again when that asks for them."""
    wall = podstates.to_seconds(now)
    observation = await observing.observe(
        kube=kube, hubs=hubs, namespace=namespace, name=name, memory=memory, wall=wall
    )
    observation = dataclasses.replace(observation, annotate_pods=annotate_pods)
    decision = deciding.decide(observation, now=now)
    if decision.spec_error is not None:
        return decision
    # The checkpoint blobs, when the decision needs their epochs (or the probe is due).
    more = await observing.read_checkpoints(
        kube=kube, hubs=hubs, observation=observation, decision=decision, memory=memory, wall=wall
    )
    if more is not None:
        decision = deciding.decide(more, now=now)
    if decision.unlisted:
        logger.warning(
            "%s/%s: partitions %s are assigned but not listed by Event Hubs; keeping them",
            namespace,
            name,
            list(decision.unlisted),
        )
    return decision
