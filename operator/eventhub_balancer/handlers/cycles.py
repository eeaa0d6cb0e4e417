"""One reconcile cycle of one EventHubConsumer: observe, decide, apply.

A plain async function over two ports (`ports.KubePort`, `ports.HubPort`), so it runs and is
tested without kopf; the daemon in `registering` only decides *when* to call it. `observing`
and `checkpointreads` read, `reconciling.deciding` decides (pure), `writing` writes in the
order that makes a crash at any point safe. The checkpoint blobs are read only when the first
decision asks for them, and then the cycle decides again with them; a cycle after which a
partition waits for its owner's release (it revoked, or a pod is terminating) lists them after
its writes, for the cycle the release wakes (`checkpointreads.read_ahead`).

Reading the pods and deciding cost what the fleet costs; most wake-ups change nothing (the
interval's safety net, the echo of the operator's own writes, another consumer's event). A
decision that wrote and read nothing more is kept (`memories.Settled`) with its inputs: the
watch's count of the events that concerned this consumer (`ports.KubePort.stamp`), the
CR's resourceVersion, the partition list, the peers and the store's state. A cycle that finds
the same inputs before the decision's next deadline (`deciding.Decision.settled_until`) or the
store's next probe reads nothing more and decides nothing: the decision stands.

Each decision takes the carry the last one handed on (`memories.Memory.carry`) and hands on
its own: `deciding.decide` keeps nothing between calls, the caller does.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Hashable

from eventhub_balancer.contracts import podstates
from eventhub_balancer.handlers import (
    backlogs,
    checkpointreads,
    memories,
    metrics,
    observing,
    ports,
    writing,
)
from eventhub_balancer.reconciling import conflicts, deciding, observations, retries

logger = logging.getLogger(__name__)


#: Each cycle's timing at DEBUG (``ehb -vv operator``): when it woke (UTC, to the
#: microsecond), how long it took to decide, and how long its writes took. A slow rebalance
#: shows here whether the operator waited to wake, thought, or wrote; the benchmarks time the
#: stages of a hand-off from these lines (`benchmarks.stages` in the devstack).
CYCLE_TIMES = "%s/%s: cycle woke at %s, decided in %.1f ms, %d writes in %.1f ms"


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
    bindings: conflicts.Bindings = conflicts.UNBOUND,
    backlog: backlogs.Budget | None = None,
    events: writing.Handover | None = None,
) -> Result:
    """Reconcile one EventHubConsumer once. Raises only transient Kubernetes API errors.

    ``annotate_pods``: also write each pod's partitions into an annotation on the Pod (for
    humans; it needs patch on pods, which the install grants only when it is switched on).
    ``events``: where the cycle hands its Kubernetes Events over instead of posting them
    itself (`eventposts.Poster.post`): the next cycle does not wait for them.
    """
    started, writes_before = time.monotonic(), dict(kube.writes)
    woke = time.time()
    try:
        decision, observation = await _decide(
            kube=kube,
            hubs=hubs,
            namespace=namespace,
            name=name,
            memory=memory,
            now=now,
            annotate_pods=annotate_pods,
            bindings=bindings,
            backlog=backlog,
        )
        decided = time.monotonic()
        writes = await writing.apply(
            kube=kube, namespace=namespace, name=name, decision=decision, events=events
        )
        wall = podstates.to_seconds(now)
        if any(m.kind == "revoke" for m in decision.moves) or (
            decision.awaits_release and not checkpointreads.stands(memory.store_ahead, wall=wall)
        ):
            # The releases wake the cycle that gives these partitions out: it finds the blobs
            # listed (`checkpointreads.read_ahead`), while the old owners checkpoint. A cycle
            # that revokes lists for itself; one that only waits for releases (a terminating
            # pod's, or hand-offs started before) lists unless a listing ahead stands.
            await checkpointreads.read_ahead(
                kube=kube,
                hubs=hubs,
                observation=observation,
                memory=memory,
                wall=wall,
            )
        logger.debug(
            CYCLE_TIMES,
            namespace,
            name,
            _utc(woke),
            (decided - started) * 1000,
            writes,
            (time.monotonic() - decided) * 1000,
        )
    finally:
        if metrics is not None:
            metrics.record_cycle(
                namespace=namespace,
                consumer=name,
                seconds=time.monotonic() - started,
                # The Events handed over are counted as the poster posts them (`eventposts`).
                writes={
                    k: n - writes_before.get(k, 0)
                    for k, n in kube.writes.items()
                    if events is None or k != "event"
                },
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
    bindings: conflicts.Bindings = conflicts.UNBOUND,
    backlog: backlogs.Budget | None = None,
) -> tuple[deciding.Decision, observations.Observation]:
    """Observe and decide; read the checkpoint blobs and decide again when that asks for them.
    The settled decision stands instead while nothing it was taken from changed. With the
    decision, the observation it was taken from."""
    wall = podstates.to_seconds(now)
    # Before any read: an event during the reads makes the next cycle decide again.
    stamp = kube.stamp(namespace=namespace, name=name)
    observation = await observing.observe_consumer(
        kube=kube, hubs=hubs, namespace=namespace, name=name, memory=memory, wall=wall
    )
    observation = dataclasses.replace(observation, annotate_pods=annotate_pods, bindings=bindings)
    inputs = _inputs(stamp, observation, memory)
    kept, memory.settled = memory.settled, None
    if kept is not None and inputs is not None and kept.inputs == inputs and wall < kept.until:
        memory.settled = kept
        return _unlisted(namespace, name, _standing(kept, wall=wall)), observation
    if observation.spec is None:
        decision, memory.carry = deciding.decide(observation, memory.carry, now=now)
        return decision, observation
    observation = await observing.observe_pods(kube=kube, observation=observation)
    decision, memory.carry = deciding.decide(observation, memory.carry, now=now)
    if decision.needs_pods:
        # A pod the record names may be gone or not yet shown: the pods are listed afresh.
        kube.forget_pods(namespace=namespace, name=name)
        observation = await observing.observe_pods(kube=kube, observation=observation)
        decision, memory.carry = deciding.decide(observation, memory.carry, now=now)
    if decision.spec_error is not None or decision.needs_pods:
        return decision, observation
    # The checkpoint blobs, when the decision needs their epochs (or the probe is due).
    more = await checkpointreads.read_checkpoints(
        kube=kube,
        hubs=hubs,
        observation=observation,
        decision=decision,
        memory=memory,
        wall=wall,
        backlog=backlog,
    )
    if more is not None:
        decision, memory.carry = deciding.decide(more, memory.carry, now=now)
    elif inputs is not None and decision.settled_until is not None:
        # Taken from what the next cycle reads too (no blobs): it stands until a deadline.
        until = min(
            decision.settled_until, retries.next_probe(memory.store_checked_at, memory.store)
        )
        memory.settled = memories.Settled(
            inputs=inputs, until=until, decided_at=wall, decision=decision
        )
    return _unlisted(namespace, name, decision), observation


def _inputs(
    stamp: Hashable | None, observation: observations.Observation, memory: memories.Memory
) -> Hashable | None:
    """What a settled decision was taken from, short of the pods and ConfigMaps (``stamp``
    stands for them); None when a change could go unnoticed (no watch, no resourceVersion)."""
    meta = observation.body.get("metadata") or {}
    version = meta.get("resourceVersion")
    if stamp is None or not version or observation.spec is None:
        return None
    return (
        stamp,
        meta.get("uid"),
        version,
        observation.hub,
        observation.peers,
        observation.annotate_pods,
        memory.store_fault,
        memory.store_checked_at,
    )


def _standing(kept: memories.Settled, *, wall: float) -> deciding.Decision:
    """The settled decision again at ``wall``: nothing to write, no figures to record again,
    its deadline (if any) as far away as it is now."""
    decision = kept.decision
    next_in = decision.next_in
    if next_in is not None:
        next_in = max(deciding.MIN_NEXT_IN, kept.decided_at + next_in - wall)
    return dataclasses.replace(decision, figures=None, next_in=next_in)


def _unlisted(namespace: str, name: str, decision: deciding.Decision) -> deciding.Decision:
    if decision.unlisted:
        logger.warning(
            "%s/%s: partitions %s are assigned but not listed by Event Hubs; keeping them",
            namespace,
            name,
            list(decision.unlisted),
        )
    return decision


def _utc(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).isoformat(timespec="microseconds")
