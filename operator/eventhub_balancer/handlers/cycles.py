"""One reconcile cycle of one EventHubConsumer: observe, decide, apply.

A plain async function over two ports (`ports.KubePort`, `ports.HubPort`), so it runs and is
tested without kopf; the daemon in `registering` only decides *when* to call it. `observing`
and `checkpointreads` read, `reconciling.deciding` decides (pure), `writing` writes in the
order that makes a crash at any point safe.

The cycle keeps no rules of its own. It reads what a decision needs to be taken at all (the
CR, the partition list, the pods and ConfigMaps), decides, and reads what the decision says
it still needs (h11's ``NEED_DATA``: `decisions.Decision.needs_pods`, ``needs_checkpoints``,
``needs_last_sequences``), then decides again over the same bodies, each read at most once a
cycle. A decision that wrote and read nothing more stands while its inputs do
(`reconciling.deadlines`), and one that starts hand-offs has the blobs listed beside its writes
(`deadlines.lists_ahead`). It is the one writer of the consumer's record
(`memories.Memory`): the readers return what they learnt, and it keeps that and what the
decision hands on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import time

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions, podstates
from eventhub_balancer.handlers import (
    backlogs,
    checkpointreads,
    dependencylines,
    memories,
    metrics,
    observing,
    ports,
    writing,
)
from eventhub_balancer.reconciling import (
    conflicts,
    deadlines,
    deciding,
    decisions,
    kubeevents,
    observations,
    rollbacks,
)

logger = logging.getLogger(__name__)


#: Each cycle's timing at DEBUG (``ehb -vv operator``): when it woke (UTC, to the
#: microsecond), how long it took to decide, and how long its writes took. A slow rebalance
#: shows here whether the operator waited to wake, thought, or wrote; the benchmarks time the
#: stages of a hand-off from these lines (`benchmarks.stages` in the devstack).
CYCLE_TIMES = "%s/%s: cycle woke at %s, decided in %.1f ms, %d writes in %.1f ms"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
    writes: int  # API writes made
    decision: decisions.Decision


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
    pod_scope: str = "",
    backlog: backlogs.Budget | None = None,
    events: writing.Handover | None = None,
    lines: dependencylines.DependencyLines | None = None,
) -> Result:
    """Reconcile one EventHubConsumer once. Raises only transient Kubernetes API errors.

    ``annotate_pods``: also write each pod's partitions into an annotation on the Pod (for
    humans; it needs patch on pods, which the install grants only when it is switched on).
    ``pod_scope``: the operator's ``--pod-selector`` as written, named where no pod is found
    (the cache behind ``kube`` already reads only the pods it selects).
    ``events``: where the cycle hands its Kubernetes Events over instead of posting them
    itself (`eventposts.Poster.post`): the next cycle does not wait for them.
    ``lines``: the operator's, that say the fault many consumers meet together once for them
    (None: said as for this consumer alone).
    """
    if lines is None:
        lines = dependencylines.DependencyLines()
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
            pod_scope=pod_scope,
            backlog=backlog,
            lines=lines,
        )
        decided = time.monotonic()
        wall = podstates.to_seconds(now)
        ahead: asyncio.Future[memories.StorePacing] | None = None
        if deadlines.lists_ahead(decision, observation, wall=wall):
            # The releases wake the cycle that gives these partitions out: it finds the blobs
            # listed (`checkpointreads.read_ahead`) while the old owners checkpoint. Listed
            # beside the writes, not after them: a release that comes before the listing is
            # done holds that cycle up until it is.
            ahead = asyncio.ensure_future(
                checkpointreads.read_ahead(
                    kube=kube,
                    hubs=hubs,
                    observation=observation,
                    store=memory.store,
                    wall=wall,
                    lines=lines,
                )
            )
        try:
            writes = await writing.apply(
                kube=kube, namespace=namespace, name=name, decision=decision, events=events
            )
        except BaseException as failed:
            memory.refused = writing.refused(failed) or memory.refused
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)
            raise
        memory.refused = None  # every write went out
        if ahead is not None:
            memory.store = await ahead
        if writes and (decision.status or decision.epochs is not None):
            # The status as written (the cache holds the write's answer): a status someone
            # writes back to before it is told from it (`rollbacks`).
            with contextlib.suppress(errors.EventHubBalancerError):
                body = await kube.get_consumer(namespace=namespace, name=name)
                memory.carry = rollbacks.remember(memory.carry, body)
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
    if metrics is not None and decision.ready is not None:
        metrics.set_ready(
            namespace=namespace,
            consumer=name,
            ready=decision.ready.status == "True",
            reason=decision.ready.reason,
        )
    if metrics is not None:
        # As the status says it after this cycle: its write, or the body read when unchanged.
        written = decision.status.get("conditions", observation.status.get("conditions"))
        store = conditions.find(written, conditions.CHECKPOINT_STORE_REACHABLE) or {}
        metrics.set_store(
            namespace=namespace,
            consumer=name,
            status=store.get("status"),
            reason=str(store.get("reason") or ""),
        )
    # The moves as their Events tell them, one line per (kind, from, to); each partition's
    # at DEBUG: a rebalance of 1,024 partitions is a few lines, not a thousand. The other
    # Events (posted when a fault starts, changes or ends, never at every cycle) as they say
    # it, but those a reader logs itself, paced (`kubeevents.KubeEvent.logged`).
    for e in decision.events:
        if e.reason in kubeevents.MOVES:
            logger.info("%s/%s: %s", namespace, name, e.message)
        elif not e.logged:
            level = logging.WARNING if e.type == "Warning" else logging.INFO
            logger.log(level, "%s/%s: %s: %s", namespace, name, e.reason, e.message)
    for m in decision.moves:
        logger.debug(
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
    pod_scope: str = "",
    backlog: backlogs.Budget | None = None,
    lines: dependencylines.DependencyLines,
) -> tuple[decisions.Decision, observations.Observation]:
    """Observe and decide, then read what the decision still needs and decide again; or the
    settled decision, while nothing it was taken from changed. With the decision, the
    observation it was taken from."""
    wall = podstates.to_seconds(now)
    # Before any read: an event during the reads makes the next cycle decide again.
    stamp = kube.stamp(namespace=namespace, name=name)
    observation, memory.hub = await observing.observe_consumer(
        kube=kube, hubs=hubs, namespace=namespace, name=name, memory=memory, wall=wall, lines=lines
    )
    observation = dataclasses.replace(
        observation, annotate_pods=annotate_pods, bindings=bindings, pod_scope=pod_scope
    )
    taken_from = deadlines.inputs(stamp, observation)
    kept, memory.settled = memory.settled, None
    if kept is not None and deadlines.stands(kept, taken_from, wall=wall):
        memory.settled = kept
        return _unlisted(namespace, name, deadlines.standing(kept, wall=wall), memory), observation

    def sighted(read: observations.Observation) -> observations.Observation:
        # Each pod's state as first seen on this operator's clock (`podstates.Sighting`).
        memory.sightings = podstates.sightings(memory.sightings, read.pods, wall=wall)
        return dataclasses.replace(read, sightings=memory.sightings)

    if observation.spec is not None:
        observation = sighted(await observing.observe_pods(kube=kube, observation=observation))
    decision, memory.carry = deciding.decide(observation, memory.carry, now=now)
    if decision.needs_pods:
        # The pods as read could not say whether a pod is gone: they are listed afresh.
        kube.forget_pods(namespace=namespace, name=name)
        observation = sighted(await observing.observe_pods(kube=kube, observation=observation))
        decision, memory.carry = deciding.decide(observation, memory.carry, now=now)
    if decision.spec_error is not None or decision.needs_pods:
        return decision, observation
    # The checkpoint blobs, when the decision needs their epochs (or the store's probe is due).
    more, memory.store = await checkpointreads.read_checkpoints(
        kube=kube,
        hubs=hubs,
        observation=observation,
        decision=decision,
        store=memory.store,
        wall=wall,
        lines=lines,
        backlog=backlog,
    )
    if more is not None:
        observation = more
        decision, memory.carry = deciding.decide(observation, memory.carry, now=now)
    else:
        # Taken from what the next cycle reads too (no blobs): it stands until a deadline.
        memory.settled = deadlines.settle(
            decision,
            taken_from,
            wall=wall,
            store_backoff=memory.store.backoff,
            store_checked_at=memory.store.checked_at,
        )
    return _unlisted(namespace, name, decision, memory), observation


def _unlisted(
    namespace: str, name: str, decision: decisions.Decision, memory: memories.Memory
) -> decisions.Decision:
    unlisted = tuple(decision.unlisted)
    if unlisted and unlisted != memory.unlisted:
        logger.warning(
            "%s/%s: partitions %s are assigned but not listed by Event Hubs; keeping them",
            namespace,
            name,
            list(unlisted),
        )
    memory.unlisted = unlisted
    return decision


def _utc(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).isoformat(timespec="microseconds")
