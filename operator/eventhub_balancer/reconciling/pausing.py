"""``spec.paused``: release every partition by ordered hand-off and assign none, pure.

A pause is not a special path through the cycle: the planner is told that no member may own
anything, by seeing every member that would keep or get partitions as draining (as if it
were terminating). The hand-off then runs as for any drain: each partition is marked
revoking, its pod stops, checkpoints and acknowledges, and the partition is left without an
owner at its epoch (`planning` keeps the epoch of a partition nobody can take); a pod that
does not acknowledge within ``handoffTimeoutSeconds`` is fenced out by the next owner's
higher epoch. The pods themselves stay up and Ready: their ConfigMaps list no partitions.

The ``Paused`` condition is True only once no pod holds or is releasing a partition, because
``ehb checkpoints reset`` trusts it: while hand-offs are in flight a pod may still write a
checkpoint. Ready and Balanced say ``Paused`` rather than raise an alarm about partitions
without an owner: nothing is owned because the spec asks for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import conditions, statusbodies

#: The reasons of the Paused condition.
PAUSED = "Paused"
PAUSING = "Pausing"
RESUMED = "Resumed"
NOT_PAUSED = "NotPaused"


def members(
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


def condition(
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
                    f"spec.paused is true: {held} partitions are still being released by "
                    "ordered hand-off"
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
        message = f"spec.paused is true: {held} of {len(partitions)} partitions are being released"
        return (
            conditions.Condition(
                type=conditions.READY, status="False", reason=PAUSING, message=message
            ),
            conditions.Condition(
                type=conditions.BALANCED, status="False", reason=PAUSING, message=message
            ),
        )
    message = (
        f"spec.paused is true: all {len(partitions)} partitions are released and none is "
        "assigned; set spec.paused to false to resume"
    )
    return (
        conditions.Condition(type=conditions.READY, status="True", reason=PAUSED, message=message),
        conditions.Condition(
            type=conditions.BALANCED, status="True", reason=PAUSED, message=message
        ),
    )
