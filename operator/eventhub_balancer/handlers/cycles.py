"""One reconcile cycle of one EventHubConsumer: read, plan, write what changed.

A plain async function over two ports (`ports.KubePort`, `ports.HubPort`), so it runs and is
tested without kopf; the kopf daemon in `registering` only decides *when* to call it.

This module is the orchestration only, step by step: `observing` reads the world (partitions,
pods, ConfigMaps, checkpoints), the planner decides, `writing` writes in the order that makes a
crash at any point safe, and `reporting` builds the conditions, Events and metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Mapping

from eventhub_balancer import errors
from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import conditions, podstates, specs
from eventhub_balancer.handlers import (
    assignments,
    memories,
    observing,
    ports,
    reporting,
    writing,
)
from eventhub_balancer.handlers.metrics import Metrics

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
    writes: int
    moves: tuple[models.Move, ...]
    balanced: bool
    #: seconds until the next cycle should run at the latest (hand-off timeouts, grace ends)
    next_in: float | None
    spec_error: str | None = None


def _wall(now: datetime.datetime) -> float:
    return podstates.to_seconds(now)


async def run_cycle(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: memories.Memory,
    now: datetime.datetime,
    metrics: Metrics | None = None,
) -> Result:
    """Reconcile one EventHubConsumer once. Raises only transient Kubernetes API errors."""
    started = time.monotonic()
    writes_before = dict(kube.writes)
    try:
        return await _cycle(
            kube=kube,
            hubs=hubs,
            namespace=namespace,
            name=name,
            memory=memory,
            now=now,
            metrics=metrics,
        )
    finally:
        if metrics is not None:
            metrics.cycle_duration.labels(namespace, name).observe(time.monotonic() - started)
            for kind, count in kube.writes.items():
                delta = count - writes_before.get(kind, 0)
                if delta:
                    metrics.api_writes.labels(namespace, name, kind).inc(delta)


async def _cycle(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: memories.Memory,
    now: datetime.datetime,
    metrics: Metrics | None,
) -> Result:
    body = await kube.get_consumer(namespace=namespace, name=name)
    meta = body.get("metadata") or {}
    generation = int(meta.get("generation") or 0)
    previous: specs.StatusBody = body.get("status") or {}
    memory.generation = generation
    wall = _wall(now)
    writes = 0

    try:
        spec = specs.parse_spec(body.get("spec") or {})
    except errors.InvalidInput as e:
        message = f"spec.{e.field.removeprefix('spec.')} is invalid: {e.problem}"
        bad = [
            conditions.Condition(
                type=conditions.READY, status="False", reason="InvalidSpec", message=message
            ),
        ]
        writes += await writing.write_status(
            kube=kube,
            namespace=namespace,
            name=name,
            body=body,
            desired={
                "observedGeneration": generation,
                "conditions": conditions.apply(
                    previous.get("conditions"), bad, observed_generation=generation, now=now
                ),
            },
        )
        if reporting.changed(previous, bad[0]):
            await writing.post_event(
                kube,
                body,
                assignments.Event(reason="InvalidSpec", message=message, type="Warning"),
                now,
            )
            writes += 1
        return Result(writes=writes, moves=(), balanced=False, next_in=None, spec_error=message)

    # 1. Partition ids (or the last known ones).
    hub_condition, partitions = await observing.read_partitions(
        kube=kube,
        hubs=hubs,
        namespace=namespace,
        name=name,
        spec=spec,
        memory=memory,
        previous=previous,
        wall=wall,
    )

    # 2. Pods and 3. the assignment as the ConfigMaps hold it.
    cluster = await observing.read_cluster(kube=kube, namespace=namespace, name=name, spec=spec)
    pods, maps = cluster.pods, cluster.maps
    memory.pods = frozenset(pods) | frozenset(m.pod for m in maps)
    status_epochs = {str(k): v for k, v in (previous.get("epochs") or {}).items()}

    def read_back() -> assignments.ReadBack:
        # Again after the checkpoint blobs raised an epoch floor: the same read, newer floors.
        return assignments.read_back(
            maps=maps,
            pods=pods,
            status_epochs=status_epochs,
            stored_epochs=memory.stored_epochs,
            now=now,
            last_owners=assignments.last_owners(previous),
        )

    readback = read_back()
    if partitions is None:
        # Never seen the Event Hub: plan only over what is assigned, so that failover works.
        known = set(readback.floors) | set(readback.assignment)
        partitions = tuple(planning.ordered_partitions(models.PartitionId(p) for p in known))
    else:
        # Event Hubs partitions never go away; a shorter list is a wrong answer or a wrong
        # hub, not a reason to revoke what is assigned.
        missing = set(readback.assignment) - set(partitions)
        if missing:
            logger.warning(
                "%s/%s: partitions %s are assigned but not listed by Event Hubs; keeping them",
                namespace,
                name,
                sorted(missing, key=models.name_key),
            )
            partitions = tuple(planning.ordered_partitions([*partitions, *missing]))

    members = assignments.members(pods)
    scenario = models.Scenario(
        partitions=partitions,
        members=members,
        assignment=readback.assignment,
        released=readback.released,
        now=wall,
        options=spec.balancing.to_options(),
    )
    plan = planning.plan(scenario)

    # The checkpoint blobs: a floor for epochs whenever a partition gets a new owner, the
    # lag for weighting "lag", and the CheckpointStoreReachable condition.
    gives_out = any(m.kind != "revoke" and m.target is not None for m in plan.moves)
    store_condition = await observing.read_checkpoints(
        kube=kube,
        hubs=hubs,
        namespace=namespace,
        spec=spec,
        memory=memory,
        wall=wall,
        needed=gives_out or spec.balancing.weighting == "lag",
    )
    stored_floor_raises = any(
        memory.stored_epochs.get(p, 0) > readback.floors.get(models.PartitionId(p), 0)
        for p in memory.stored_epochs
    )
    if stored_floor_raises or spec.balancing.weighting == "lag":
        readback = read_back()
        lag = await observing.read_lag(
            hubs=hubs,
            spec=spec,
            memory=memory,
            partitions=partitions,
            kube=kube,
            namespace=namespace,
        )
        scenario = dataclasses.replace(
            scenario, assignment=readback.assignment, released=readback.released, lag=lag
        )
        plan = planning.plan(scenario)

    # 4. Writes, in the safe order.
    new_epochs = assignments.epochs(plan.assignment, readback.floors, status_epochs)
    if await writing.raise_epochs(
        kube=kube, namespace=namespace, name=name, epochs=new_epochs, current=status_epochs
    ):
        writes += 1
        previous = {**previous, "epochs": new_epochs}

    planned = assignments.derive_writes(
        spec=spec,
        consumer=name,
        namespace=namespace,
        assignment=plan.assignment,
        maps=maps,
        pods=pods,
        pod_annotations=cluster.pod_annotations,
        problems=readback.problems,
    )
    writes += await writing.apply_writes(kube=kube, namespace=namespace, planned=planned)

    # 5. Status and conditions.
    cond = reporting.build_conditions(
        plan=plan,
        pods=pods,
        partitions=partitions,
        hub=hub_condition,
        store=store_condition,
        spec=spec,
    )
    events = reporting.build_events(
        plan=plan,
        problems=readback.problems,
        planned=planned,
        verdicts=cond,
        previous=previous,
    )
    owner_changes = sum(1 for m in plan.moves if m.kind != "revoke" and m.target is not None)
    outcome = assignments.Outcome(
        generation=generation,
        partitions=partitions,
        pods=pods,
        assignment=plan.assignment,
        floors=readback.floors,
        owner_changes=owner_changes,
        balanced=plan.balanced,
        grace_seconds=float(spec.balancing.pod_grace_seconds),
        conditions=tuple(cond),
    )
    desired = assignments.build_status(outcome=outcome, previous=previous, now=now)
    # The Events and the rest of the status go out together (post_event only logs a failure),
    # so that the next cycle (a hand-off waiting on an acknowledgement) starts sooner.
    status_written = asyncio.ensure_future(
        writing.write_status(
            kube=kube,
            namespace=namespace,
            name=name,
            body=body,
            desired=dict(desired),
            previous=previous,
        )
    )
    await asyncio.gather(
        status_written, *(writing.post_event(kube, body, event, now) for event in events)
    )
    writes += status_written.result() + len(events)

    if metrics is not None:
        reporting.observe(
            metrics,
            namespace=namespace,
            name=name,
            plan=plan,
            before=readback,
            wall=wall,
            partitions=partitions,
            hub_ok=hub_condition.status == "True",
        )
    for m in plan.moves:
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
    return Result(
        writes=writes,
        moves=plan.moves,
        balanced=plan.balanced,
        next_in=_next_in(plan=plan, pods=pods, spec=spec, wall=wall),
    )


def _next_in(
    *,
    plan: models.Plan,
    pods: Mapping[str, podstates.PodState],
    spec: specs.ConsumerSpec,
    wall: float,
) -> float | None:
    """The next moment something changes on its own: a hand-off times out, a grace ends."""
    deadlines = [
        o.since + spec.balancing.handoff_timeout_seconds
        for o in plan.assignment.values()
        if o.state == "revoking"
    ]
    owners = {o.owner for o in plan.assignment.values() if o.owner}
    deadlines += [
        podstates.to_seconds(p.since) + spec.balancing.pod_grace_seconds
        for p in pods.values()
        if p.state == "notready" and p.name in owners
    ]
    future = [d - wall for d in deadlines if d - wall > -1]
    return max(0.05, min(future)) if future else None
