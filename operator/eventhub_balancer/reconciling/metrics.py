"""What a cycle reports to Prometheus, as plain numbers: `handlers.metrics` only sets them.

Computed here, from the plan and what was read, so that the figures are tested as data and
the metrics module stays a registry of instruments.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.reconciling import readbacks, reports

#: Events not yet checkpointed that one replica may carry before another is recommended: two
#: batches of the consumer's default size (500), which a healthy pod clears within seconds;
#: more than that per pod means the pods do not keep up.
LAG_PER_REPLICA = 1000


def recommended_replicas(
    *, partitions: int, backlog: int | None, members: int, lag_per_replica: int = LAG_PER_REPLICA
) -> int:
    """How many consumer pods an autoscaler should run: enough for the backlog, no more than
    the partitions (a pod with no partition only waits), at least 1 while partitions exist.

    ``backlog`` is the events not yet checkpointed over all partitions; None when it is not
    known, and then the recommendation is to keep the ``members`` there are. Scaling in
    slowly is the autoscaler's part (a stabilization window): this is the figure of now.
    """
    if lag_per_replica < 1:
        raise ValueError(f"lag_per_replica must be at least 1, not {lag_per_replica}")
    if partitions <= 0:
        return 0
    wanted = members if backlog is None else math.ceil(max(0, backlog) / lag_per_replica)
    return max(1, min(partitions, wanted))


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
    #: events not yet checkpointed over all partitions; None when not read this cycle
    backlog: int | None = None
    #: pods an autoscaler should run (`recommended_replicas`); from the backlog when known
    recommended_replicas: int = 0
    #: ``spec.paused``: its partitions are unowned on purpose
    paused: bool = False


def build(
    *,
    plan: models.Plan,
    before: readbacks.ReadBack,
    wall: float,
    partitions: tuple[models.PartitionId, ...],
    hub_ok: bool,
    lag: Mapping[models.PartitionId, int] | None = None,
    paused: bool = False,
) -> Figures:
    """The figures of one cycle; ``lag`` (events not yet checkpointed per partition) when the
    cycle read both the hub's last sequence numbers and the checkpoints, else None or empty."""
    per_pod: dict[str, int] = {}
    for o in plan.assignment.values():
        if o.owner is not None:
            per_pod[o.owner] = per_pod.get(o.owner, 0) + 1
    handoffs: list[tuple[str, float]] = []
    for m in plan.moves:
        old = before.assignment.get(m.partition)
        if m.kind == "takeover" and m.reason in ("released", "timeout") and old is not None:
            handoffs.append((m.reason, max(0.0, wall - old.since)))
    # An empty lag is what a cycle that read nothing passes: unknown, not zero.
    backlog = sum(lag.values()) if lag else None
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
        backlog=backlog,
        recommended_replicas=recommended_replicas(
            partitions=len(partitions), backlog=backlog, members=len(plan.targets)
        ),
        paused=paused,
    )
