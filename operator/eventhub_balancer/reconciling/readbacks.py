"""From what the ConfigMaps hold to the planner's assignment: the read-back, pure.

The operator keeps no state it cannot rebuild. Each cycle reads the assignment back from the
per-pod ConfigMaps, takes the highest epoch known per partition (status.epochs, the
checkpoint blobs) as a floor, and resolves what a crash or a human may have left behind: two
ConfigMaps claiming one partition (the higher epoch wins), an epoch below the floor (the entry
is void, the partition is re-assigned above the floor), a ConfigMap of a pod that is gone or
was re-created under the same name.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence

from eventhub_balancer import handoffs
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, podstates, specs
from eventhub_balancer.reconciling import observations


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadBack:
    """The assignment as the cluster holds it, ready for the planner."""

    assignment: Mapping[models.PartitionId, models.Ownership]
    released: Mapping[models.PartitionId, int]
    #: the highest epoch known per partition (ConfigMaps, status, checkpoints)
    floors: Mapping[models.PartitionId, int]
    #: ConfigMap name -> what is wrong with it (it will be rewritten or deleted)
    problems: Mapping[str, tuple[str, ...]]


def belongs(cm: observations.StoredMap, pods: Mapping[str, podstates.PodState]) -> bool:
    """Whether the ConfigMap is the current one of a pod that exists and has not finished."""
    pod = pods.get(cm.pod)
    if pod is None or pod.state is None:
        return False
    return not cm.pod_uid or cm.pod_uid == pod.uid


def ends_handoff(entry: configmaps.PartitionEntry, acknowledged: int | None) -> bool:
    """Whether the owner's acknowledgement ends the hand-off of ``entry`` (the hand-off table
    in `handoffs` decides: only a release of the very epoch being revoked counts)."""
    state = handoffs.partition_state(
        entry.state, epoch=entry.epoch, acknowledged=acknowledged, waited=0.0, timeout=math.inf
    )
    return state == "released"


def read_back(
    *,
    maps: Sequence[observations.StoredMap],
    pods: Mapping[str, podstates.PodState],
    status_epochs: Mapping[str, int],
    stored_epochs: Mapping[str, int],
    now: datetime.datetime,
    last_owners: Mapping[str, str] = {},
) -> ReadBack:
    """The assignment from the ConfigMaps; ``last_owners`` (from status.consumers) names the
    owner of a partition whose ConfigMap went with its pod, so that the move reads as a
    take-over from that pod rather than a fresh assignment."""
    problems: dict[str, list[str]] = {
        cm.name: list(cm.parsed.problems) for cm in maps if cm.parsed.problems
    }
    floors: dict[models.PartitionId, int] = {}
    for source in (status_epochs, stored_epochs):
        for pid, epoch in source.items():
            if isinstance(epoch, int) and not isinstance(epoch, bool):
                key = models.PartitionId(str(pid))
                floors[key] = max(floors.get(key, 0), epoch)

    claims: dict[
        models.PartitionId, list[tuple[observations.StoredMap, configmaps.PartitionEntry]]
    ] = {}
    for cm in sorted(maps, key=lambda m: models.name_key(m.name)):
        for pid, entry in cm.parsed.partitions.items():
            claims.setdefault(pid, []).append((cm, entry))

    assignment: dict[models.PartitionId, models.Ownership] = {}
    released: dict[models.PartitionId, int] = {}
    seconds_now = podstates.to_seconds(now)
    for pid, candidates in claims.items():
        # The highest epoch wins; on a tie the current ConfigMap of an existing pod, then by name.
        candidates.sort(key=lambda c: (-c[1].epoch, not belongs(c[0], pods)))
        winner, entry = candidates[0]
        for loser, other in candidates[1:]:
            problems.setdefault(loser.name, []).append(
                f"partition {pid} (epoch {other.epoch}) is also claimed by "
                f"{winner.name} with epoch {entry.epoch}"
            )
        floor = floors.get(pid, 0)
        if entry.epoch < floor:
            problems.setdefault(winner.name, []).append(
                f"partition {pid}: epoch {entry.epoch} is below {floor}, the highest given out"
            )
            assignment[pid] = models.Ownership(owner=None, epoch=floor, since=seconds_now)
            continue
        floors[pid] = entry.epoch
        since = podstates.to_seconds(entry.since) if entry.since else seconds_now
        pod = pods.get(winner.pod)
        if (
            pod is not None
            and pod.state is not None
            and winner.pod_uid
            and winner.pod_uid != pod.uid
        ):
            # A new pod under an old name (a StatefulSet): the new incarnation must fence
            # with a new epoch, so the partition is unowned at its old epoch.
            assignment[pid] = models.Ownership(owner=None, epoch=entry.epoch, since=since)
            continue
        assignment[pid] = models.Ownership(
            owner=models.MemberName(winner.pod), epoch=entry.epoch, state=entry.state, since=since
        )
        acknowledged = configmaps.parse_released(winner.annotations).get(pid)
        if acknowledged is not None and ends_handoff(entry, acknowledged):
            released[pid] = acknowledged
    for pid, floor in floors.items():
        if pid not in assignment and floor > 0:
            last = last_owners.get(pid)
            owner = models.MemberName(last) if last and last not in pods else None
            assignment[pid] = models.Ownership(owner=owner, epoch=floor, since=seconds_now)
    return ReadBack(
        assignment=assignment,
        released=released,
        floors=floors,
        problems={k: tuple(v) for k, v in problems.items()},
    )


def last_owners(status: specs.StatusBody) -> dict[str, str]:
    """partition -> the pod the last status showed owning it."""
    result: dict[str, str] = {}
    for consumer in status.get("consumers") or []:
        pod = consumer.get("pod")
        for pid in consumer.get("partitions") or []:
            if isinstance(pod, str) and isinstance(pid, str):
                result[pid] = pod
    return result


def members(pods: Mapping[str, podstates.PodState]) -> tuple[models.Member, ...]:
    return tuple(
        models.Member(
            name=models.MemberName(p.name), state=p.state, since=podstates.to_seconds(p.since)
        )
        for p in sorted(pods.values(), key=lambda p: models.name_key(p.name))
        if p.state is not None
    )
