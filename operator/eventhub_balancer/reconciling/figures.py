"""What a cycle reports to Prometheus, as plain numbers: `handlers.metrics` only sets them.

Computed here, from the plan and what was read, so that the figures are tested as data and
the metrics module stays a registry of instruments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.reconciling import readbacks, reports


@dataclasses.dataclass(frozen=True, kw_only=True)
class Figures:
    """The gauges' values and the counters' increments of one cycle."""

    per_pod: Mapping[str, int]  # partitions owned per pod (including those being released)
    partition_count: int
    members: int
    balanced: bool
    handoffs_in_flight: int
    eventhub_reachable: bool
    moves: tuple[tuple[str, str], ...]  # (kind, reason) per move
    #: (how it ended: "released" | "timeout", seconds from revoke to take-over) per hand-off
    handoffs: tuple[tuple[str, float], ...]
    #: partitions their pods report in trouble, per state (every state, 0 when none)
    troubled: Mapping[str, int] = dataclasses.field(default_factory=dict)


def build(
    *,
    plan: models.Plan,
    before: readbacks.ReadBack,
    wall: float,
    partitions: tuple[models.PartitionId, ...],
    hub_ok: bool,
) -> Figures:
    per_pod: dict[str, int] = {}
    for o in plan.assignment.values():
        if o.owner is not None:
            per_pod[o.owner] = per_pod.get(o.owner, 0) + 1
    handoffs: list[tuple[str, float]] = []
    for m in plan.moves:
        old = before.assignment.get(m.partition)
        if m.kind == "takeover" and m.reason in ("released", "timeout") and old is not None:
            handoffs.append((m.reason, max(0.0, wall - old.since)))
    return Figures(
        per_pod=per_pod,
        partition_count=len(partitions),
        members=len(plan.targets),
        balanced=plan.balanced,
        handoffs_in_flight=sum(1 for o in plan.assignment.values() if o.state == "revoking"),
        eventhub_reachable=hub_ok,
        moves=tuple((m.kind, m.reason) for m in plan.moves),
        handoffs=tuple(handoffs),
        troubled=reports.counts(reports.standing(before.troubles, plan.assignment)),
    )
