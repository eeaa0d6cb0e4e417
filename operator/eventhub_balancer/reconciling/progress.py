"""The conditions of progress, pure: Reconciling and Stalled, which generic tools read, and
Paused, with how a pause drains the consumer.

kstatus (sigs.k8s.io/cli-utils), which Flux's health checks and ``kubectl wait``-like tools
use, knows nothing of Ready and Balanced beyond "Ready False means in progress": it reads the
"abnormal-true" pair ``Reconciling`` (work under way that settles by itself) and ``Stalled``
(nothing moves until a person changes the spec, a Secret or Azure). Without them a consumer
mid-hand-off would read as Current and one that cannot process as InProgress forever. They
follow from the conditions a cycle wrote (`applied`), so every path that writes conditions (a
cycle, an invalid spec, a refusal) adds them the same way, and the Argo CD health check
(charts/eventhub-balancer/argocd/health.lua) reads the same truth.

``spec.paused`` releases every partition by ordered hand-off and assigns none. A pause is not
a special path through the cycle: the planner is told that no member may own anything, by
seeing every member that would keep or get partitions as draining, as if it were terminating
(`paused_members`). The hand-off then runs as for any drain: each partition is marked revoking, its
pod stops, checkpoints and acknowledges, and the partition is left without an owner at its
epoch (`planning` keeps the epoch of a partition nobody can take); a pod that does not
acknowledge within ``handoffTimeoutSeconds`` is fenced out by the next owner's higher epoch.
The pods themselves stay up and Ready: their ConfigMaps list no partitions. The ``Paused``
condition is True only once no pod holds or is releasing a partition (`paused_condition`), because
``ehb checkpoints reset`` trusts it: while hand-offs are in flight a pod may still write a
checkpoint. Ready and Balanced say ``Paused`` rather than raise an alarm about partitions
without an owner (`ready_and_balanced`): nothing is owned because the spec asks for it.

A consumer scaled to zero by its autoscaler (KEDA ``minReplicaCount: 0``) is as it should be
too (`at_zero`). At zero no pod matches ``spec.selector``: Ready said ``NoPods`` ("fix the
selector or the pods' labels") with Reconciling True for as long as it stayed there, so Argo
CD showed it Progressing, Flux InProgress, and EventHubConsumerNotReady and
EventHubPartitionsWithoutReadyOwner fired. Pods that all left are told from a selector that
matches nothing by the record (`ran_here`): the last status listed pods at this generation (a
scale-in), or already said ``ScaledToZero`` (an operator restart or a spec change at zero). A
selector that never matched, or an edited one that matches none of the running pods, still
reads ``NoPods``. Ready is True while no event waits, False once the backlog (read at least
once a minute) says some do; a cycle that read none keeps what the last one said.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence

from eventhub_balancer import errors
from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import conditions, statusbodies
from eventhub_balancer.reconciling import conflicts

RECONCILING = "Reconciling"
STALLED = "Stalled"

#: Ready reasons that wait for a person: the spec is invalid or overlaps another consumer's,
#: Event Hubs or the checkpoint store cannot be used as the spec names them, every partition
#: fails in the handler, or pods that hold partitions are never told them or never apply them.
STALLED_READY_REASONS = frozenset(
    {
        "InvalidSpec",
        "EventHubUnusable",
        "CheckpointStoreUnusable",
        "AllPartitionsFailing",
        "AssignmentNotApplied",
        "AssignmentNotWritten",
        conflicts.REASON,
        conflicts.REASON_SHARED,
        conflicts.REASON_BOUND,
    }
)
#: Reasons of a dependency's fault that may pass by themselves (`errors.TransientError`'s).
TRANSIENT_REASONS = frozenset(
    {
        errors.TransientError.reason,
        errors.EventHubUnreachable.reason,
        errors.CheckpointStoreUnreachable.reason,
        errors.ApiUnavailable.reason,
        errors.Conflict.reason,
    }
)


def _stall(current: Sequence[statusbodies.ConditionBody]) -> statusbodies.ConditionBody | None:
    """The condition that says what waits for a person, if one does."""
    ready = conditions.find(current, conditions.READY)
    if ready is None or ready.get("status") != "False":
        return None
    if ready.get("reason") in STALLED_READY_REASONS:
        return ready
    if ready.get("reason") == "PartitionsUnknown":
        # No partition list yet: stalled only if Event Hubs refuses for good.
        hub = conditions.find(current, conditions.EVENTHUB_REACHABLE)
        if (
            hub is not None
            and hub.get("status") == "False"
            and hub.get("reason") not in TRANSIENT_REASONS
        ):
            return hub
    return None


def _under_way(current: Sequence[statusbodies.ConditionBody]) -> statusbodies.ConditionBody | None:
    """The condition that says what settles by itself (hand-offs, starting pods), if any."""
    for type_ in (conditions.READY, conditions.BALANCED):
        found = conditions.find(current, type_)
        if found is not None and found.get("status") != "True":
            return found
    return None


def concluded(current: Sequence[statusbodies.ConditionBody]) -> list[conditions.Condition]:
    """Reconciling and Stalled as ``current`` (the conditions just written) implies them."""
    stall = _stall(current)
    if stall is not None:
        return [
            conditions.Condition(
                type=RECONCILING,
                status="False",
                reason="Stalled",
                message="nothing moves until the fault in Stalled is fixed",
            ),
            conditions.Condition(
                type=STALLED,
                status="True",
                reason=stall.get("reason") or "Stalled",
                message=stall.get("message") or "",
            ),
        ]
    stalled_not = conditions.Condition(
        type=STALLED,
        status="False",
        reason="NoStandingFault",
        message="nothing waits for a change of the spec, a Secret or Azure",
    )
    work = _under_way(current)
    if work is not None:
        return [
            conditions.Condition(
                type=RECONCILING,
                status="True",
                reason=work.get("reason") or "Reconciling",
                message=work.get("message") or "",
            ),
            stalled_not,
        ]
    return [
        conditions.Condition(
            type=RECONCILING, status="False", reason="Settled", message=_settled_words(current)
        ),
        stalled_not,
    ]


def _settled_words(current: Sequence[statusbodies.ConditionBody]) -> str:
    """Reconciling's message when nothing is under way: a paused consumer and one scaled to
    zero are settled with no partition owned, so they say what Ready says instead."""
    ready = conditions.find(current, conditions.READY)
    if ready is None or ready.get("reason") == "AllPartitionsOwned":
        return "every partition is owned by a Ready pod and the assignment is balanced"
    return conditions.shorten(
        f"nothing is under way: {ready.get('message') or ready.get('reason')}"
    )


def applied(
    current: Sequence[statusbodies.ConditionBody] | None,
    updates: Iterable[conditions.Condition],
    *,
    observed_generation: int,
    now: datetime.datetime,
) -> list[statusbodies.ConditionBody]:
    """`conditions.apply` of ``updates``, then Reconciling and Stalled as the result implies."""
    written = conditions.apply(current, updates, observed_generation=observed_generation, now=now)
    return conditions.apply(
        written, concluded(written), observed_generation=observed_generation, now=now
    )


#: The reasons of the Paused condition.
PAUSED = "Paused"
PAUSING = "Pausing"
RESUMED = "Resumed"
NOT_PAUSED = "NotPaused"


def paused_members(
    members: Sequence[models.Member], *, now: float, options: models.Options
) -> tuple[models.Member, ...]:
    """The members as the planner sees them while paused: those that would keep or get
    partitions (live, or NotReady within the grace) drain them by hand-off; a gone member
    stays gone, so its partitions are freed at once (nothing waits on a dead process). A
    paused pod is not stopping, so nothing of its own will release its partitions: they are
    revoked at once, without the wait a terminating pod gets (`Options.release_wait_seconds`)."""
    revoked_at_once = now - options.release_wait_seconds
    return tuple(
        dataclasses.replace(m, state="terminating", since=revoked_at_once)
        if planning.standing(m, now=now, options=options) in ("live", "held")
        else m
        for m in members
    )


def holding(assignment: Mapping[models.PartitionId, models.Ownership]) -> int:
    """How many partitions a pod still holds or is releasing."""
    return sum(1 for o in assignment.values() if o.owner is not None)


def paused_condition(
    *,
    paused: bool,
    assignment: Mapping[models.PartitionId, models.Ownership],
    previous: statusbodies.StatusBody,
) -> conditions.Condition:
    """The Paused condition: True only when paused and no pod holds or releases anything."""
    if paused:
        held = holding(assignment)
        if held:
            return conditions.Condition(
                type=conditions.PAUSED,
                status="False",
                reason=PAUSING,
                message=(
                    f"spec.paused is true: {conditions.counted(held, 'partition', 'is', 'are')} "
                    "still being released by ordered hand-off"
                ),
            )
        return conditions.Condition(
            type=conditions.PAUSED,
            status="True",
            reason=PAUSED,
            message=(
                "spec.paused is true: no pod holds a partition and none is assigned; "
                "checkpoints can be reset"
            ),
        )
    old = conditions.find(previous.get("conditions"), conditions.PAUSED)
    if old is not None and old.get("reason") in (PAUSED, PAUSING, RESUMED):
        return conditions.Condition(
            type=conditions.PAUSED,
            status="False",
            reason=RESUMED,
            message="spec.paused is false: partitions are assigned again, with higher epochs",
        )
    return conditions.Condition(
        type=conditions.PAUSED, status="False", reason=NOT_PAUSED, message="spec.paused is false"
    )


def ready_and_balanced(
    *,
    assignment: Mapping[models.PartitionId, models.Ownership],
    partitions: Sequence[models.PartitionId],
) -> tuple[conditions.Condition, conditions.Condition]:
    """Ready and Balanced while paused: True with reason Paused once everything is released
    (the consumer is as its spec asks), False with reason Pausing while hand-offs run."""
    held = holding(assignment)
    if held:
        message = (
            f"spec.paused is true: {held} of {conditions.amount(len(partitions), 'partition')} "
            f"{'is' if held == 1 else 'are'} being released"
        )
        return (
            conditions.Condition(
                type=conditions.READY, status="False", reason=PAUSING, message=message
            ),
            conditions.Condition(
                type=conditions.BALANCED, status="False", reason=PAUSING, message=message
            ),
        )
    message = (
        f"spec.paused is true: {conditions.every(len(partitions), 'partition', 'is', 'are')} "
        "released and none is "
        "assigned; set spec.paused to false to resume"
    )
    return (
        conditions.Condition(type=conditions.READY, status="True", reason=PAUSED, message=message),
        conditions.Condition(
            type=conditions.BALANCED, status="True", reason=PAUSED, message=message
        ),
    )


#: Ready and Balanced of a consumer scaled to zero (`at_zero`).
SCALED_TO_ZERO = "ScaledToZero"


def ran_here(previous: statusbodies.StatusBody, *, generation: int) -> bool:
    """Whether pods ran under this spec before none matched: the last status named pods at
    this generation, or already said the consumer is scaled to zero."""
    ready = conditions.find(previous.get("conditions"), conditions.READY)
    if ready is not None and ready.get("reason") == SCALED_TO_ZERO:
        return True
    return previous.get("observedGeneration") == generation and bool(previous.get("consumers"))


def at_zero(
    concluded: Sequence[conditions.Condition],
    *,
    assignment: Mapping[models.PartitionId, models.Ownership],
    previous: statusbodies.StatusBody,
    generation: int,
    backlog: int | None,
    selector: str,
) -> list[conditions.Condition]:
    """``concluded`` with Ready and Balanced saying ``ScaledToZero`` when Ready found no pod
    (``NoPods``) of a consumer that ran pods under this spec, and no pod holds a partition;
    else ``concluded`` as it is. ``backlog``: the events waiting, None when not read now."""
    ready = next((c for c in concluded if c.type == conditions.READY), None)
    if ready is None or ready.reason != "NoPods":
        return list(concluded)
    if any(o.owner is not None for o in assignment.values()):
        return list(concluded)
    if not ran_here(previous, generation=generation):
        return list(concluded)
    old = conditions.find(previous.get("conditions"), conditions.READY)
    if backlog is None and old is not None and old.get("reason") == SCALED_TO_ZERO:
        # No backlog read this cycle: what the last read said stands.
        waiting = old.get("status") == "False"
        message = str(old.get("message") or "")
    elif backlog is not None and backlog > 0:
        waiting = True
        message = (
            f"no pod runs and {conditions.counted(backlog, 'event', 'waits', 'wait')}: the "
            "autoscaler has not started a pod yet "
            "(a KEDA ScaledObject polls every pollingInterval); if none comes, check it, and "
            f"that spec.selector ({selector}) matches its pods"
        )
    else:
        waiting = False
        message = (
            "no pod runs and no event waits: scaled to zero (by an autoscaler or by hand); "
            "the pods that come back share every partition, each taking its share once Ready"
        )
    replaced = {
        conditions.READY: conditions.Condition(
            type=conditions.READY,
            status="False" if waiting else "True",
            reason=SCALED_TO_ZERO,
            message=message,
        ),
        conditions.BALANCED: conditions.Condition(
            type=conditions.BALANCED,
            status="True",
            reason=SCALED_TO_ZERO,
            message="no pod runs: scaled to zero, nothing to spread",
        ),
    }
    return [replaced.get(c.type, c) for c in concluded]
