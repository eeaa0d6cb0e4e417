"""When a decision changes on its own: the deadlines it names, pure.

Nothing in a decision depends on the time but a hand-off's timeout, a NotReady pod's grace,
a terminating owner's wait for its own release (the plan's ``release_deadlines``) and the
hold of a partition reported lost right after it was given out (``held``).
`next_in` says when the cycle should come back for the nearest one; `settled_until` says until
when a decision that writes nothing stands over the same observation (the cycle skips reading
and deciding until then: `handlers.cycles`). Both look at the hand-offs in the plan and at the
NotReady pods alone, which the fleet keeps as a sum (`fleets.Fleet.notready`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import podstates, specs

#: The soonest a cycle comes back for a deadline (a hand-off timeout, a grace period): a
#: deadline just passed is acted on without a busy loop.
MIN_NEXT_IN = 0.05
#: A deadline this far in the past is stale (the cycle that acted on it already ran).
STALE_DEADLINE = 1.0


def next_in(
    *,
    plan: models.Plan,
    pods: Mapping[str, podstates.PodState],
    spec: specs.ConsumerSpec,
    wall: float,
    notready: Iterable[str] | None = None,
    held: Iterable[float] = (),
) -> float | None:
    """The next moment something changes on its own: a hand-off times out, a NotReady owner's
    or a starting pod's grace ends, a held report of a lost partition is due. ``notready``:
    the NotReady pods' names (`fleets.Fleet.notready`); None: any pod may be."""
    deadlines = [
        o.since + spec.balancing.handoff_timeout_seconds
        for o in plan.assignment.values()
        if o.state == "revoking"
    ]
    owners = {o.owner for o in plan.assignment.values() if o.owner}
    # A held owner's partitions are taken over when its grace ends, and a starting pod's share
    # stops being kept for it (a decision at or after that moment already plans without it).
    grace = spec.balancing.pod_grace_seconds
    for p in _notready(pods, notready):
        end = podstates.to_seconds(p.since) + grace
        if p.name in owners or (p.starting and end > wall):
            deadlines.append(end)
    deadlines += held
    deadlines += plan.release_deadlines
    future = [d - wall for d in deadlines if d - wall > -STALE_DEADLINE]
    return max(MIN_NEXT_IN, min(future)) if future else None


def settled_until(
    *,
    quiet: bool,
    plan: models.Plan,
    pods: Mapping[str, podstates.PodState],
    spec: specs.ConsumerSpec,
    wall: float,
    notready: Iterable[str] | None = None,
    held: Iterable[float] = (),
) -> float | None:
    """Until when a decision stands over the same observation (`deciding.Decision`'s
    ``settled_until``); ``quiet``: it writes nothing and needs no further read."""
    if not quiet or spec.balancing.to_options().weighting == "lag":
        return None
    deadlines = _deadlines(plan, _notready(pods, notready), spec, wall)
    deadlines += [d for d in held if d > wall]
    return min(deadlines, default=math.inf)


def _notready(
    pods: Mapping[str, podstates.PodState], notready: Iterable[str] | None
) -> list[podstates.PodState]:
    if notready is None:
        return [p for p in pods.values() if p.state == "notready"]
    return [pods[name] for name in notready]


def _deadlines(
    plan: models.Plan,
    notready: Iterable[podstates.PodState],
    spec: specs.ConsumerSpec,
    wall: float,
) -> list[float]:
    """Each moment at which the same observation decides otherwise: the timeout of each
    hand-off and the grace of each NotReady pod (owner or not: the status counts members) not
    yet over at ``wall``, tested as the planner tests them."""
    timeout = spec.balancing.handoff_timeout_seconds
    deadlines = [
        o.since + timeout
        for o in plan.assignment.values()
        if o.state == "revoking" and wall - o.since < timeout
    ]
    grace = spec.balancing.pod_grace_seconds
    for p in notready:
        since = podstates.to_seconds(p.since)
        if wall - since < grace:
            deadlines.append(since + grace)
    deadlines += [d for d in plan.release_deadlines if d > wall]
    return deadlines
