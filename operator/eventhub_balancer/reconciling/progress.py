"""Reconciling and Stalled: the two conditions generic tools read, concluded from ours, pure.

kstatus (sigs.k8s.io/cli-utils), which Flux's health checks and ``kubectl wait``-like tools
use, knows nothing of Ready and Balanced beyond "Ready False means in progress": it reads the
"abnormal-true" pair ``Reconciling`` (work under way that settles by itself) and ``Stalled``
(nothing moves until a person changes the spec, a Secret or Azure). Without them a consumer
mid-hand-off would read as Current and one that cannot process as InProgress forever.

They follow from the conditions a cycle wrote, so every path that writes conditions (a cycle,
an invalid spec, a refusal) adds them the same way, and the Argo CD health check
(charts/eventhub-balancer/argocd/health.lua) reads the same truth.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions, statusbodies
from eventhub_balancer.reconciling import conflicts

RECONCILING = "Reconciling"
STALLED = "Stalled"

#: Ready reasons that wait for a person: the spec is invalid or overlaps another consumer's,
#: Event Hubs or the checkpoint store cannot be used as the spec names them, or every partition
#: fails in the handler.
STALLED_READY_REASONS = frozenset(
    {
        "InvalidSpec",
        "EventHubUnusable",
        "CheckpointStoreUnusable",
        "AllPartitionsFailing",
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
            type=RECONCILING,
            status="False",
            reason="Settled",
            message="every partition is owned by a Ready pod and the assignment is balanced",
        ),
        stalled_not,
    ]


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
