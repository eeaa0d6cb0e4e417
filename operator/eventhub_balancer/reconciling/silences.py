"""Pods that hold partitions and say nothing of them, pure: Ready's word on them.

The record says who owns what; only the pods can say they read it. A consumer pod applies its
ConfigMap within a second of the write and says so (the annotation
``eventhub-balancer.dev/applied-generation``), so a Ready owner that has not, a minute after it
was given its partitions, reads none of them:

- its ConfigMap is not there (``unwritten``): the operator's writes of it are refused (a
  ResourceQuota on ConfigMaps, an admission policy, the operator's RBAC) and fail every cycle;
- its ConfigMap is there and it never applied any generation (``unapplied``): it does not run
  `ehb consume` (the selector also matches another workload's pods), or cannot read or patch
  its ConfigMap.

Either way Ready is False and says what to change (`ready`). A pod that applied an earlier
generation runs a consumer: a later generation on its way is a hand-off, which Balanced and
the hand-off timeout cover.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, configmaps, podstates
from eventhub_balancer.reconciling import observations

#: How long a Ready pod may hold partitions without a word before Ready says nothing reads
#: them: far above the second a consumer pod takes (a Spark pod is NotReady until its session
#: is warm, then applies), and above a few retries of a refused write.
UNAPPLIED_SECONDS = 60.0
#: Pods named in the message; the rest are counted.
NAMED = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class Silences:
    """The silent Ready owners past `UNAPPLIED_SECONDS`, each with the partitions it holds, and
    the moments at which the others' silence comes due."""

    unwritten: Mapping[str, int] = dataclasses.field(default_factory=dict)
    unapplied: Mapping[str, int] = dataclasses.field(default_factory=dict)
    due: tuple[float, ...] = ()


def find(
    *,
    current: Mapping[str, observations.StoredMap],
    assignment: Mapping[models.PartitionId, models.Ownership],
    pods: Mapping[str, podstates.PodState],
    wall: float,
) -> Silences:
    """The Ready owners of ``assignment`` (the plan) that have no ConfigMap in ``current`` (each
    pod's) since they were given their first partition, or never applied the one they have."""
    held: dict[str, int] = {}
    given: dict[str, float] = {}  # the earliest moment each owner was given what it holds
    for o in assignment.values():
        if o.owner is not None:
            held[o.owner] = held.get(o.owner, 0) + 1
            given[o.owner] = min(given.get(o.owner, o.since), o.since)
    unwritten: dict[str, int] = {}
    unapplied: dict[str, int] = {}
    due: list[float] = []
    for pod in sorted(held, key=models.name_key):
        state = pods.get(pod)
        if state is None or not state.ready:
            continue
        cm = current.get(pod)
        if cm is None:
            found, since = unwritten, given[pod]
        elif configmaps.parse_applied_generation(cm.annotations) is None:
            times = [e.since for e in cm.parsed.partitions.values() if e.since is not None]
            if not times:
                continue
            found, since = unapplied, podstates.to_seconds(min(times))
        else:
            continue
        if wall >= since + UNAPPLIED_SECONDS:
            found[pod] = held[pod]
        else:
            due.append(since + UNAPPLIED_SECONDS)
    return Silences(unwritten=unwritten, unapplied=unapplied, due=tuple(due))


def _who(found: Mapping[str, int], partitions: int) -> str:
    """ "pod c holds 1 of 4 partitions", or "pods c, d and 2 more hold 6 of 32 partitions"."""
    names = list(found)
    named = ", ".join(names[:NAMED]) + (
        f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    )
    who = f"pod {named} holds" if len(names) == 1 else f"pods {named} hold"
    return f"{who} {sum(found.values())} of {partitions} partitions"


def ready(found: Silences | None, *, partitions: int, selector: str) -> conditions.Condition | None:
    """Ready False while a Ready owner is silent past `UNAPPLIED_SECONDS`, naming what to
    change (the operator's writes first: no pod can apply what was never written); None:
    none is."""
    if found is None:
        return None
    if found.unwritten:
        return conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="AssignmentNotWritten",
            message=conditions.shorten(
                f"{_who(found.unwritten, partitions)}, but the operator has not written "
                f"{'its' if len(found.unwritten) == 1 else 'their'} assignment ConfigMap "
                f"within {UNAPPLIED_SECONDS:g} s: nothing reads them. The API server refuses the "
                "write (the operator's log and ehb_cycles_total{result} say why): a "
                "ResourceQuota on configmaps, an admission policy or the operator's RBAC in "
                "this namespace"
            ),
        )
    if found.unapplied:
        one = len(found.unapplied) == 1
        return conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="AssignmentNotApplied",
            message=conditions.shorten(
                f"{_who(found.unapplied, partitions)} but {'has' if one else 'have'} not "
                f"applied {'its' if one else 'their'} assignment ConfigMap within "
                f"{UNAPPLIED_SECONDS:g} s: nothing reads them. A pod that does not run "
                f"`ehb consume` matches spec.selector ({selector}): narrow the selector to the "
                "consumer pods; or the pods' ServiceAccount lacks list, watch and patch on "
                "configmaps (see the pod's log)"
            ),
        )
    return None
