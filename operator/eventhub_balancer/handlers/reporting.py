"""What a cycle tells people and Prometheus: the conditions, the Events, the metrics.

No API calls: built from the plan and what was read, kept apart from the reads and writes so that
the wording of conditions and Events can change without touching the order of writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, podstates, specs
from eventhub_balancer.handlers import assignments
from eventhub_balancer.handlers.metrics import Metrics


def build_conditions(
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


def changed(previous: specs.StatusBody, c: conditions.Condition) -> bool:
    old = conditions.find(previous.get("conditions"), c.type)
    return old is None or old.get("status") != c.status or old.get("reason") != c.reason


def was_false(previous: specs.StatusBody, c: conditions.Condition) -> bool:
    old = conditions.find(previous.get("conditions"), c.type)
    return old is not None and old.get("status") == "False"


def build_events(
    *,
    plan: models.Plan,
    problems: Mapping[str, tuple[str, ...]],
    planned: assignments.Writes,
    verdicts: Sequence[conditions.Condition],
    previous: specs.StatusBody,
) -> list[assignments.Event]:
    """The moves, the ConfigMaps rewritten to repair them, the dependencies lost or regained."""
    events = assignments.move_events(plan.moves)
    for cm_name, cm_problems in sorted(problems.items()):
        if any(w.name == cm_name for w in planned.maps) or any(
            d.name == cm_name for d in planned.deletes
        ):
            events.append(
                assignments.Event(
                    reason="ConfigMapRepaired",
                    type="Warning",
                    message=f"ConfigMap {cm_name} was rewritten: {'; '.join(cm_problems)[:900]}",
                )
            )
    for c in verdicts:
        if (
            c.status == "False"
            and changed(previous, c)
            and c.type in (conditions.EVENTHUB_REACHABLE, conditions.CHECKPOINT_STORE_REACHABLE)
        ):
            events.append(assignments.Event(reason=c.reason, message=c.message, type="Warning"))
        elif (
            c.status == "True"
            and c.type == conditions.EVENTHUB_REACHABLE
            and was_false(previous, c)
        ):
            events.append(assignments.Event(reason="EventHubReachable", message=c.message))
    return events


def observe(
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
