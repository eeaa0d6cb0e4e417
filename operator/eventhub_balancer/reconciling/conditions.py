"""The status conditions a cycle concludes: Ready, Balanced, the two dependencies and
PartitionsFailing (worded in `reports`), and Conflict once the overlap is gone.

Ready also says when owners read none of what they hold (`silentowners`: no ConfigMap
written, or none applied, a minute after they were given partitions).

Kept apart from the writes, so that the wording changes without touching what is written when.
A dependency's fault keeps the error's own reason, else one naming the dependency (API rules).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from eventhub_balancer import errors
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, podstates, specs, statusbodies
from eventhub_balancer.reconciling import (
    conflicts,
    foreignreaders,
    lostblobs,
    observations,
    podwords,
    progress,
    reports,
    silentowners,
)

#: How long a starting pod is waited for (`censuses.starting_until`), as the conditions say it.
STARTING_BOUND = (
    ", for at most podGraceSeconds after coming up, or after the first pod Ready since then"
)


def _reason(fault: observations.Fault, *, misconfigured: str, unreachable: str) -> str:
    """The error's own reason, or for the generic classes one that names the dependency."""
    if fault.reason == errors.ConfigurationError.reason:
        return misconfigured
    if fault.reason == errors.TransientError.reason:
        return unreachable
    return fault.reason


def hub(
    read: observations.HubRead, *, spec: specs.ConsumerSpec, assigned: bool = True
) -> conditions.Condition:
    """EventHubReachable: listed, or the fault and what the cycle plans over meanwhile (not
    ``assigned``: no partition is known, none is given out)."""
    if read.fault is not None:
        over = "the last known partition list" if read.ids else "the partitions already assigned"
        fallback = (
            f"keeping the current assignment over {over}"
            if read.ids or assigned
            else "no partition is assigned yet: none is given out until the partition list is read"
        )
        # No retry delay in the message: it changes every attempt, the status must not.
        return conditions.Condition(
            type=conditions.EVENTHUB_REACHABLE,
            status="False",
            reason=_reason(
                read.fault, misconfigured="EventHubMisconfigured", unreachable="EventHubUnreachable"
            ),
            message=f"{read.fault.message} ({fallback}; retrying with backoff)",
        )
    where = f"Event Hub {spec.event_hub_name!r} in {spec.fully_qualified_namespace}"
    return conditions.Condition(
        type=conditions.EVENTHUB_REACHABLE,
        status="True",
        reason="PartitionsListed",
        message=f"{where} has {conditions.amount(len(read.ids or ()), 'partition')}",
    )


def store(
    read: observations.StoreRead,
    *,
    spec: specs.ConsumerSpec,
    ignored: tuple[str, ...] = (),
    leaps: tuple[str, ...] = (),
) -> conditions.Condition:
    """CheckpointStoreReachable: read (now or before), failing, or not read yet; a blob epoch
    too far above the record (``leaps``) makes it False with ``CheckpointEpochTampered``,
    epochs out of range (a blob's, or the status's) with ``EpochOutOfRange``, naming each;
    an SDK processor beside the pods (`foreignreaders`) and blobs deleted since they were
    listed (`lostblobs`) make it False too."""
    if leaps:
        return conditions.Condition(
            type=conditions.CHECKPOINT_STORE_REACHABLE,
            status="False",
            reason="CheckpointEpochTampered",
            message=conditions.shorten("; ".join((*leaps, *ignored))),
        )
    if ignored:
        return conditions.Condition(
            type=conditions.CHECKPOINT_STORE_REACHABLE,
            status="False",
            reason="EpochOutOfRange",
            message=conditions.shorten(f"ignored: {'; '.join(ignored)}"),
        )
    if read.fault is not None:
        return conditions.Condition(
            type=conditions.CHECKPOINT_STORE_REACHABLE,
            status="False",
            reason=_reason(
                read.fault,
                misconfigured="CheckpointStoreMisconfigured",
                unreachable="CheckpointStoreUnreachable",
            ),
            message=f"{read.fault.message} (retrying with backoff)",
        )
    if read.foreign:
        return foreignreaders.condition(spec)  # an SDK processor on the consumer group
    if read.gone:
        return lostblobs.condition(read.gone, spec=spec)  # blobs deleted since they were listed
    if read.listed or read.checkpoints is not None:
        return conditions.Condition(
            type=conditions.CHECKPOINT_STORE_REACHABLE,
            status="True",
            reason="CheckpointsListed",
            message=f"container {spec.checkpoint_container!r} is readable",
        )
    return conditions.Condition(
        type=conditions.CHECKPOINT_STORE_REACHABLE,
        status="Unknown",
        reason="NotChecked",
        message="the checkpoint store has not been read yet",
    )


def build(
    *,
    plan: models.Plan,
    pods: Mapping[str, podstates.PodState],
    partitions: tuple[models.PartitionId, ...],
    hub: conditions.Condition,
    store: conditions.Condition,
    spec: specs.ConsumerSpec,
    troubles: Mapping[models.PartitionId, reports.Trouble] | None = None,
    previous: statusbodies.StatusBody | None = None,
    ready_count: int | None = None,
    pod_scope: str = "",
    silent: silentowners.Silences | None = None,
    refused: observations.Fault | None = None,
) -> list[conditions.Condition]:
    """All six conditions, Ready first (Paused last: `progress`, which words Ready and
    Balanced while ``spec.paused`` is true).

    A partition its pod reports in trouble still counts as owned for Ready and Balanced:
    the pod is alive and holds it (moving it would carry the fault along); PartitionsFailing
    says what is wrong with it. ``pod_scope`` (the operator's ``--pod-selector``) is named
    where no pod is found; ``silent``: the owners that say nothing of what they hold, and
    ``refused``: why the last ConfigMap write failed.
    """
    # ``ready_count``: the fleet's count of Ready pods (`fleets.Fleet.ready`); else counted here.
    ready_pods = sum(1 for p in pods.values() if p.ready) if ready_count is None else ready_count
    unowned = [
        p
        for p in partitions
        if (o := plan.assignment.get(p)) is None
        or o.owner is None
        or not (pods.get(o.owner) is not None and pods[o.owner].ready)
    ]
    grace = float(spec.balancing.pod_grace_seconds)
    kept = podstates.kept(pods, (o.owner for o in plan.assignment.values()), grace=grace)
    selector = spec.selector.to_query()
    # Pods the operator does not watch match nothing: say so, or the selector looks right.
    watched = f" among the pods the operator watches ({pod_scope})" if pod_scope else ""
    stopped = cannot_process(hub=hub, store=store, partitions=partitions, troubles=troubles or {})
    if stopped is not None:  # with the partitions unknown too: the fault is what to fix
        ready = stopped
    elif not partitions:
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
                f"no pod matches spec.selector ({selector}){watched}: fix the selector or the "
                "pods' labels"
            ),
        )
    elif not ready_pods:
        ready = conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="NoReadyPods",
            message=conditions.shorten(
                f"{conditions.counted(len(pods), 'pod', 'matches', 'match')} spec.selector"
                f"{watched} but none is Running and Ready: "
                f"{podwords.not_ready(pods.values())} (kubectl describe pod and the pods' logs "
                "say why)"
            ),
        )
    elif (
        quiet := silentowners.ready(
            silent, partitions=len(partitions), selector=selector, refused=refused
        )
    ) is not None:
        ready = quiet
    elif unowned:
        ready = conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="PartitionsWithoutReadyOwner",
            message=conditions.shorten(
                f"{len(unowned)} of {conditions.amount(len(partitions), 'partition')} "
                f"{'has' if len(unowned) == 1 else 'have'} no Ready owner yet"
                + (f": {podwords.kept_words(kept, grace=grace)}" if kept else "")
                + (
                    "; partitions nobody processed yet wait for "
                    f"{conditions.amount(len(plan.starting), 'starting pod')}{STARTING_BOUND}"
                    if plan.starting
                    else ""
                )
            ),
        )
    else:
        ready = conditions.Condition(
            type=conditions.READY,
            status="True",
            reason="AllPartitionsOwned",
            message=f"{conditions.every(len(partitions), 'partition', 'is', 'are')} owned by "
            + ("a Ready pod" if len(partitions) == 1 else "Ready pods"),
        )
    in_flight = sum(1 for o in plan.assignment.values() if o.state == "revoking")
    if not partitions:
        # Nothing is spread over nothing: Balanced waits for a partition list, as Ready does.
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="False",
            reason="PartitionsUnknown",
            message="no partitions to balance: see EventHubReachable",
        )
    elif plan.balanced:
        # NotReady pods that hold nothing and wait for no share: a rollout's new pod whose
        # container cannot be created, say; the Ready pods are balanced without them.
        holders = {o.owner for o in plan.assignment.values()}.union(plan.starting)
        stuck = [s for s in pods.values() if s.state == "notready" and s.name not in holders]
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="True",
            reason="Balanced",
            message=(
                conditions.amount(len(partitions) - sum(k.partitions for k in kept), "partition")
                + f" over {conditions.amount(ready_pods, 'Ready pod')}"
                + (f"; {podwords.kept_words(kept, grace=grace)}" if kept else "")
                + (
                    f"; {conditions.amount(idle, 'Ready pod')} more than partitions, standing idle"
                    if (idle := ready_pods - len(partitions)) > 0
                    else ""
                )
                + (f"; {podwords.holding_nothing(stuck)}" if stuck else "")
            ),
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
            message=f"{conditions.counted(in_flight, 'partition', 'is', 'are')} being handed off",
        )
    elif plan.release_deadlines:
        leaving = sorted(
            {
                o.owner
                for o in plan.assignment.values()
                if o.owner is not None
                and (state := pods.get(o.owner)) is not None
                and state.state == "terminating"
            },
            key=models.name_key,
        )
        held = sum(1 for o in plan.assignment.values() if o.owner in leaving)
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="False",
            reason="PodsLeaving",
            message=(
                f"{conditions.counted(held, 'partition', 'waits', 'wait')} for "
                f"{'its' if held == 1 else 'their'} terminating "
                f"{'pod' if len(leaving) == 1 else 'pods'} "
                f"({', '.join(leaving[:3])}{' and more' if len(leaving) > 3 else ''}) to "
                f"release {'it' if held == 1 else 'them'}; whatever is not released soon is "
                "revoked and handed off"
            ),
        )
    elif plan.starting:
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="False",
            reason="PodsStarting",
            message=(
                f"{len(plan.starting)} pods are starting: their shares stay"
                if len(plan.starting) > 1
                else "1 pod is starting: its share stays"
            )
            + f" with the current owners until Ready{STARTING_BOUND}",
        )
    else:
        balanced = conditions.Condition(
            type=conditions.BALANCED,
            status="False",
            reason="Rebalancing",
            message="some pods are above or below their share",
        )
    if spec.paused and partitions:
        ready, balanced = progress.ready_and_balanced(
            assignment=plan.assignment, partitions=partitions
        )
    paused = progress.paused_condition(
        paused=spec.paused, assignment=plan.assignment, previous=previous or {}
    )
    failing = reports.condition(troubles or {})
    if failing.status == "False" and partitions and not ready_pods:
        # A pod reports only what it processes: read alone, "AllPartitionsProcessing" over
        # pods that cannot start said all was well.
        failing = dataclasses.replace(
            failing, message=f"{failing.message}; no pod is Ready to process (see Ready)"
        )
    return [ready, balanced, hub, store, failing, paused]


def cannot_process(
    *,
    hub: conditions.Condition,
    store: conditions.Condition,
    partitions: tuple[models.PartitionId, ...],
    troubles: Mapping[models.PartitionId, reports.Trouble],
) -> conditions.Condition | None:
    """Ready False when the pods cannot process whatever the operator assigns: a fault of
    Event Hubs or of the checkpoint store that stops them too (`conditions.CANNOT_PROCESS`:
    a missing consumer group, hub or Secret key), or every partition reported failing,
    parked or stuck. None: nothing says so."""
    for dependency, reason, name in (
        (hub, "EventHubUnusable", "Event Hubs"),
        (store, "CheckpointStoreUnusable", "the checkpoint store"),
    ):
        if dependency.status == "False" and dependency.reason in conditions.CANNOT_PROCESS:
            return conditions.Condition(
                type=conditions.READY,
                status="False",
                reason=reason,
                message=conditions.shorten(
                    f"the pods cannot use {name} ({dependency.reason}, see {dependency.type}): "
                    f"{dependency.message}"
                ),
            )
    stuck = [t for t in troubles.values() if t.state != "lost"]
    if partitions and len(stuck) >= len(partitions):
        return conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="AllPartitionsFailing",
            message=(
                f"{conditions.every(len(partitions), 'partition', 'is', 'are')} reported failing, "
                "parked or stuck: "
                "nothing is processed (see PartitionsFailing)"
            ),
        )
    return None


def conflict_cleared(previous: statusbodies.StatusBody) -> list[conditions.Condition]:
    """Conflict False once the overlap is gone (nothing while there never was one)."""
    old = conditions.find(previous.get("conditions"), conflicts.CONFLICT)
    if old is None or old.get("status") == "False":
        return []
    return [
        conditions.Condition(
            type=conflicts.CONFLICT,
            status="False",
            reason=conflicts.REASON_CLEARED,
            message="no other EventHubConsumer selects these pods or this checkpoint location",
        )
    ]
