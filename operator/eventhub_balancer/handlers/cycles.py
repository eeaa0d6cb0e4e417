"""One reconcile cycle of one EventHubConsumer: read, plan, write what changed.

A plain async function over two ports (`ports.KubePort`, `ports.HubPort`), so it runs and is
tested without kopf; the kopf daemon in `registering` only decides *when* to call it.

The order of writes is what makes a crash at any point safe:
1. status.epochs first, when the plan gives out a higher epoch: epochs never go back even if
   every ConfigMap is lost right after;
2. the ConfigMaps that gain a partition, then those that lose one (a crash in between leaves a
   duplicate claim that the higher epoch resolves);
3. pod annotations, deletion of stale ConfigMaps, Events, the rest of the status.

Faults never shrink the assignment: when Event Hubs cannot be asked, the cycle plans over the
last known partition list (the cache, else the partitions in status.epochs), so pod failures
are still handled, and Event Hubs is retried with exponential backoff.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import conditions, configmaps, podstates, specs
from eventhub_balancer.handlers import assignments, ports
from eventhub_balancer.handlers.metrics import Metrics

logger = logging.getLogger(__name__)

#: The longest backoff between attempts to reach Event Hubs or the checkpoint store.
MAX_BACKOFF_SECONDS = 300.0
#: How often the checkpoint store is probed when nothing needs its epochs (for the condition).
CHECKPOINT_PROBE_SECONDS = 60.0
COMPONENT = "eventhub-balancer"


@dataclasses.dataclass
class Memory:
    """What the operator remembers about one consumer between cycles: nothing it needs.

    All of it is an optimisation (backoff timers, the last probe): a restarted operator
    starts with an empty Memory and reaches the same decisions.
    """

    hub_retry_at: float = 0.0
    hub_backoff: float = 0.0
    hub_fault: conditions.Condition | None = None
    store_checked_at: float = -1e18
    store_retry_at: float = 0.0
    store_backoff: float = 0.0
    store_condition: conditions.Condition | None = None
    stored_epochs: dict[str, int] = dataclasses.field(default_factory=dict)
    stored_sequences: dict[str, int] = dataclasses.field(default_factory=dict)
    pods: frozenset[str] = frozenset()
    generation: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
    writes: int
    moves: tuple[models.Move, ...]
    balanced: bool
    #: seconds until the next cycle should run at the latest (hand-off timeouts, grace ends)
    next_in: float | None
    spec_error: str | None = None


#: Failures of the Kubernetes API itself (not of what a spec points at): no condition can
#: describe them, since the status cannot be written either; the whole cycle is retried.
_KUBE_API_ERRORS = (errors.Conflict, errors.ApiUnavailable)


def _reason(error: errors.EventHubBalancerError, *, misconfigured: str, unreachable: str) -> str:
    """The error's own reason, or for the generic classes one that names the dependency."""
    if error.reason == errors.ConfigurationError.reason:
        return misconfigured
    if error.reason == errors.TransientError.reason:
        return unreachable
    return error.reason


def _backoff(previous: float, base: float) -> float:
    return min(MAX_BACKOFF_SECONDS, max(base, previous * 2))


def _wall(now: datetime.datetime) -> float:
    return podstates.to_seconds(now)


async def _secret(kube: ports.KubePort, namespace: str, creds: specs.Credentials) -> str | None:
    if creds.secret_ref is None:
        return None
    return await kube.read_secret_key(
        namespace=namespace, name=creds.secret_ref.name, key=creds.secret_ref.key
    )


async def run_cycle(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: Memory,
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
    memory: Memory,
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
        writes += await _write_status(
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
        if _changed(previous, bad[0]):
            await _post(
                kube,
                body,
                assignments.Event(reason="InvalidSpec", message=message, type="Warning"),
                now,
            )
            writes += 1
        return Result(writes=writes, moves=(), balanced=False, next_in=None, spec_error=message)

    # 1. Partition ids (or the last known ones).
    hub_condition, partitions = await _partitions(
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
    pod_bodies = await kube.list_pods(namespace=namespace, label_selector=spec.selector.to_query())
    pod_bodies = [
        p
        for p in pod_bodies
        if spec.selector.matches((p.get("metadata") or {}).get("labels") or {})
    ]
    pods = {s.name: s for s in (podstates.pod_state(p) for p in pod_bodies) if s.name}
    pod_annotations = {
        str((p.get("metadata") or {}).get("name")): (p.get("metadata") or {}).get("annotations")
        or {}
        for p in pod_bodies
    }
    map_bodies = await kube.list_configmaps(
        namespace=namespace, label_selector=configmaps.consumer_selector(name)
    )
    maps = [
        m
        for m in (assignments.stored_map(b) for b in map_bodies)
        if m.parsed.consumer in (name, "")  # "" : corrupt, still ours by its label
    ]
    memory.pods = frozenset(pods) | frozenset(m.pod for m in maps)
    status_epochs = {str(k): v for k, v in (previous.get("epochs") or {}).items()}

    readback = assignments.read_back(
        maps=maps,
        pods=pods,
        status_epochs=status_epochs,
        stored_epochs=memory.stored_epochs,
        now=now,
        last_owners=assignments.last_owners(previous),
    )
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
    store_condition = await _checkpoints(
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
        readback = assignments.read_back(
            maps=maps,
            pods=pods,
            status_epochs=status_epochs,
            stored_epochs=memory.stored_epochs,
            now=now,
            last_owners=assignments.last_owners(previous),
        )
        lag = await _lag(
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
    if any(new_epochs.get(p, 0) > status_epochs.get(p, 0) for p in new_epochs):
        await kube.patch_consumer_status(
            namespace=namespace, name=name, status={"epochs": new_epochs}
        )
        writes += 1
        previous = {**previous, "epochs": new_epochs}

    planned = assignments.derive_writes(
        spec=spec,
        consumer=name,
        namespace=namespace,
        assignment=plan.assignment,
        maps=maps,
        pods=pods,
        pod_annotations=pod_annotations,
        problems=readback.problems,
    )
    for w in planned.maps:
        if w.create:
            await kube.create_configmap(namespace=namespace, body=w.body)
        else:
            await kube.patch_configmap(
                namespace=namespace, name=w.name, patch=w.body, resource_version=w.resource_version
            )
        writes += 1
    for a in planned.pods:
        await kube.patch_pod_annotations(namespace=namespace, name=a.pod, annotations=a.annotations)
        writes += 1
    for d in planned.deletes:
        await kube.delete_configmap(namespace=namespace, name=d.name, uid=d.uid or None)
        writes += 1

    events = assignments.move_events(plan.moves)
    for cm_name, problems in sorted(readback.problems.items()):
        if any(w.name == cm_name for w in planned.maps) or any(
            d.name == cm_name for d in planned.deletes
        ):
            events.append(
                assignments.Event(
                    reason="ConfigMapRepaired",
                    type="Warning",
                    message=f"ConfigMap {cm_name} was rewritten: {'; '.join(problems)[:900]}",
                )
            )
    # 5. Status and conditions.
    cond = _conditions(
        plan=plan,
        pods=pods,
        partitions=partitions,
        hub=hub_condition,
        store=store_condition,
        spec=spec,
    )
    for c in cond:
        if (
            c.status == "False"
            and _changed(previous, c)
            and c.type in (conditions.EVENTHUB_REACHABLE, conditions.CHECKPOINT_STORE_REACHABLE)
        ):
            events.append(assignments.Event(reason=c.reason, message=c.message, type="Warning"))
        elif (
            c.status == "True"
            and c.type == conditions.EVENTHUB_REACHABLE
            and _was_false(previous, c)
        ):
            events.append(assignments.Event(reason="EventHubReachable", message=c.message))
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
    for event in events:
        await _post(kube, body, event, now)
        writes += 1
    desired = assignments.build_status(outcome=outcome, previous=previous, now=now)
    writes += await _write_status(
        kube=kube,
        namespace=namespace,
        name=name,
        body=body,
        desired=dict(desired),
        previous=previous,
    )

    if metrics is not None:
        _observe(
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


async def _partitions(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    spec: specs.ConsumerSpec,
    memory: Memory,
    previous: specs.StatusBody,
    wall: float,
) -> tuple[conditions.Condition, tuple[models.PartitionId, ...] | None]:
    key = f"{namespace}/{name}"
    cached = hubs.cached(key)
    where = f"Event Hub {spec.event_hub_name!r} in {spec.fully_qualified_namespace}"
    if wall < memory.hub_retry_at and memory.hub_fault is not None:
        # Backing off: reuse the last verdict and the last list.
        return memory.hub_fault, _ids(cached)
    try:
        connection_string = await _secret(kube, namespace, spec.event_hub_credentials)
        ids, _fresh = await hubs.partitions(
            consumer=key,
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            now=wall,
        )
    except _KUBE_API_ERRORS:
        raise  # the Kubernetes API itself failed: the whole cycle retries
    except (errors.ConfigurationError, errors.TransientError) as e:
        reason = _reason(
            e, misconfigured="EventHubMisconfigured", unreachable="EventHubUnreachable"
        )
        memory.hub_backoff = _backoff(memory.hub_backoff, float(spec.balancing.interval_seconds))
        memory.hub_retry_at = wall + memory.hub_backoff
        fallback = "the last known partition list" if cached else "the partitions already assigned"
        # No retry delay in the message: it changes every attempt, the status must not.
        message = f"{e} (keeping the current assignment over {fallback}; retrying with backoff)"
        memory.hub_fault = conditions.Condition(
            type=conditions.EVENTHUB_REACHABLE, status="False", reason=reason, message=message
        )
        logger.warning("%s: %s", key, message)
        return memory.hub_fault, _ids(cached)
    memory.hub_fault = None
    memory.hub_backoff = 0.0
    memory.hub_retry_at = 0.0
    return (
        conditions.Condition(
            type=conditions.EVENTHUB_REACHABLE,
            status="True",
            reason="PartitionsListed",
            message=f"{where} has {len(ids)} partitions",
        ),
        tuple(models.PartitionId(i) for i in ids),
    )


def _ids(cached: tuple[str, ...] | None) -> tuple[models.PartitionId, ...] | None:
    return tuple(models.PartitionId(i) for i in cached) if cached else None


async def _checkpoints(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    spec: specs.ConsumerSpec,
    memory: Memory,
    wall: float,
    needed: bool,
) -> conditions.Condition:
    due = wall - memory.store_checked_at >= CHECKPOINT_PROBE_SECONDS
    if (not needed and not due) or wall < memory.store_retry_at:
        if memory.store_condition is not None:
            return memory.store_condition
        if wall < memory.store_retry_at:
            return conditions.Condition(
                type=conditions.CHECKPOINT_STORE_REACHABLE,
                status="Unknown",
                reason="NotChecked",
                message="the checkpoint store has not been read yet",
            )
    container = spec.checkpoint_container
    try:
        connection_string = await _secret(kube, namespace, spec.checkpoint_credentials)
        stored = await hubs.checkpoints(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            consumer_group=spec.consumer_group,
            container_name=container,
            connection_string=connection_string,
            account_url=spec.checkpoint_account_url or None,
        )
    except _KUBE_API_ERRORS:
        raise
    except (errors.ConfigurationError, errors.TransientError) as e:
        memory.store_backoff = _backoff(
            memory.store_backoff, float(spec.balancing.interval_seconds)
        )
        memory.store_retry_at = wall + memory.store_backoff
        reason = _reason(
            e,
            misconfigured="CheckpointStoreMisconfigured",
            unreachable="CheckpointStoreUnreachable",
        )
        memory.store_condition = conditions.Condition(
            type=conditions.CHECKPOINT_STORE_REACHABLE,
            status="False",
            reason=reason,
            message=f"{e} (retrying with backoff)",
        )
        return memory.store_condition
    memory.store_backoff = 0.0
    memory.store_retry_at = 0.0
    memory.store_checked_at = wall
    memory.stored_epochs = {p: epoch for p, (epoch, _seq) in stored.items()}
    memory.stored_sequences = {p: seq for p, (_epoch, seq) in stored.items()}
    memory.store_condition = conditions.Condition(
        type=conditions.CHECKPOINT_STORE_REACHABLE,
        status="True",
        reason="CheckpointsListed",
        message=f"container {container!r} is readable",
    )
    return memory.store_condition


async def _lag(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    spec: specs.ConsumerSpec,
    memory: Memory,
    partitions: tuple[models.PartitionId, ...],
    namespace: str,
) -> dict[models.PartitionId, int]:
    if spec.balancing.weighting != "lag" or memory.hub_fault is not None:
        return {}
    try:
        connection_string = await _secret(kube, namespace, spec.event_hub_credentials)
        last = await hubs.last_sequence_numbers(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            partitions=list(partitions),
        )
    except (errors.ConfigurationError, errors.TransientError) as e:
        logger.warning("lag unavailable, weighting by count this cycle: %s", e)
        return {}
    return {
        models.PartitionId(p): max(0, seq - memory.stored_sequences.get(p, -1))
        for p, seq in last.items()
    }


def _conditions(
    *,
    plan: models.Plan,
    pods: Mapping[str, podstates.PodState],
    partitions: tuple[models.PartitionId, ...],
    hub: conditions.Condition,
    store: conditions.Condition,
    spec: specs.ConsumerSpec,
) -> list[conditions.Condition]:
    ready_pods = [p for p in pods.values() if p.ready]
    unowned = [
        p
        for p in partitions
        if (o := plan.assignment.get(p)) is None
        or o.owner is None
        or not (pods.get(o.owner) is not None and pods[o.owner].ready)
    ]
    selector = spec.selector.to_query()
    if not partitions:
        ready = conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="PartitionsUnknown",
            message="the partition list could not be read yet: see EventHubReachable",
        )
    elif not pods:
        ready = conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="NoPods",
            message=(
                f"no pod matches spec.selector ({selector}): fix the selector or the pods' labels"
            ),
        )
    elif not ready_pods:
        ready = conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="NoReadyPods",
            message=f"{len(pods)} pods match spec.selector but none is Running and Ready",
        )
    elif unowned:
        ready = conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="PartitionsWithoutReadyOwner",
            message=f"{len(unowned)} of {len(partitions)} partitions have no Ready owner yet",
        )
    else:
        ready = conditions.Condition(
            type=conditions.READY,
            status="True",
            reason="AllPartitionsOwned",
            message=f"all {len(partitions)} partitions are owned by Ready pods",
        )
    in_flight = sum(1 for o in plan.assignment.values() if o.state == "revoking")
    if plan.balanced:
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="True",
            reason="Balanced",
            message=f"{len(partitions)} partitions over {len(ready_pods)} Ready pods",
        )
    elif not ready_pods:
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="False",
            reason="NoReadyPods",
            message="no Ready pod to balance over",
        )
    elif in_flight:
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="False",
            reason="HandoffsInFlight",
            message=f"{in_flight} partitions are being handed off",
        )
    else:
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="False",
            reason="Rebalancing",
            message="some pods are above or below their share",
        )
    return [ready, balanced, hub, store]


def _changed(previous: specs.StatusBody, c: conditions.Condition) -> bool:
    old = conditions.find(previous.get("conditions"), c.type)
    return old is None or old.get("status") != c.status or old.get("reason") != c.reason


def _was_false(previous: specs.StatusBody, c: conditions.Condition) -> bool:
    old = conditions.find(previous.get("conditions"), c.type)
    return old is not None and old.get("status") == "False"


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


def _observe(
    metrics: Metrics,
    *,
    namespace: str,
    name: str,
    plan: models.Plan,
    before: assignments.ReadBack,
    wall: float,
    partitions: tuple[models.PartitionId, ...],
    hub_ok: bool,
) -> None:
    per_pod: dict[str, int] = {}
    for o in plan.assignment.values():
        if o.owner is not None:
            per_pod[o.owner] = per_pod.get(o.owner, 0) + 1
    metrics.set_partitions(namespace=namespace, consumer=name, per_pod=per_pod)
    metrics.partition_count.labels(namespace, name).set(len(partitions))
    metrics.members.labels(namespace, name).set(len(plan.targets))
    metrics.balanced.labels(namespace, name).set(1 if plan.balanced else 0)
    metrics.handoffs_in_flight.labels(namespace, name).set(
        sum(1 for o in plan.assignment.values() if o.state == "revoking")
    )
    metrics.eventhub_reachable.labels(namespace, name).set(1 if hub_ok else 0)
    for m in plan.moves:
        metrics.moves.labels(namespace, name, m.kind, m.reason).inc()
        old = before.assignment.get(m.partition)
        if m.kind == "takeover" and m.reason in ("released", "timeout") and old is not None:
            metrics.handoff_duration.labels(namespace, name, m.reason).observe(
                max(0.0, wall - old.since)
            )


async def _write_status(
    *,
    kube: ports.KubePort,
    namespace: str,
    name: str,
    body: specs.ConsumerBody,
    desired: Mapping[str, Any],
    previous: Mapping[str, Any] | None = None,
) -> int:
    base = previous if previous is not None else (body.get("status") or {})
    patch = assignments.status_patch(base, desired)
    if not patch:
        return 0
    await kube.patch_consumer_status(namespace=namespace, name=name, status=patch)
    return 1


async def _post(
    kube: ports.KubePort, body: specs.ConsumerBody, event: assignments.Event, now: datetime.datetime
) -> None:
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
