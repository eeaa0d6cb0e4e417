"""From what the cluster shows to a planner scenario, and from a plan to the writes: pure.

The operator keeps no state it cannot rebuild. Each cycle reads the assignment back from the
per-pod ConfigMaps, takes the highest epoch known per partition (status.epochs, the
checkpoint blobs) as a floor, and resolves what a crash or a human may have left behind: two
ConfigMaps claiming one partition (the higher epoch wins), an epoch below the floor (the entry
is void, the partition is re-assigned above the floor), a ConfigMap of a pod that is gone or
was re-created under the same name. Then, after planning, it derives the writes: only
ConfigMaps, pod annotations, status fields and Events that differ from what is there.

Everything here is data in, data out, with ``now`` passed in: the cycle in `cycles` does the
I/O around it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, configmaps, podstates, specs

POD_KIND = {"apiVersion": "v1", "kind": "Pod"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredMap:
    """An assignment ConfigMap as read from the API."""

    name: str
    uid: str
    resource_version: str
    pod: str  # the pod it is for (from data, else the label)
    pod_uid: str
    data: Mapping[str, str]
    annotations: Mapping[str, str]
    parsed: configmaps.ParsedData


def stored_map(body: Mapping[str, Any]) -> StoredMap:
    meta = body.get("metadata") or {}
    data = body.get("data") or {}
    annotations = meta.get("annotations") or {}
    parsed = configmaps.parse_data(data)
    pod = parsed.pod or (meta.get("labels") or {}).get(configmaps.LABEL_POD, "")
    return StoredMap(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        pod=pod,
        pod_uid=str(annotations.get(configmaps.ANNOTATION_POD_UID, "")),
        data=dict(data),
        annotations=dict(annotations),
        parsed=parsed,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadBack:
    """The assignment as the cluster holds it, ready for the planner."""

    assignment: Mapping[models.PartitionId, models.Ownership]
    released: Mapping[models.PartitionId, int]
    #: the highest epoch known per partition (ConfigMaps, status, checkpoints)
    floors: Mapping[models.PartitionId, int]
    #: ConfigMap name -> what is wrong with it (it will be rewritten or deleted)
    problems: Mapping[str, tuple[str, ...]]


def belongs(cm: StoredMap, pods: Mapping[str, podstates.PodState]) -> bool:
    """Whether the ConfigMap is the current one of a pod that exists and has not finished."""
    pod = pods.get(cm.pod)
    if pod is None or pod.state is None:
        return False
    return not cm.pod_uid or cm.pod_uid == pod.uid


def read_back(
    *,
    maps: Sequence[StoredMap],
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

    claims: dict[models.PartitionId, list[tuple[StoredMap, configmaps.PartitionEntry]]] = {}
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
        if acknowledged is not None:
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


# --- writes ---


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapWrite:
    """Create or patch one pod's ConfigMap."""

    name: str
    pod: str
    pod_uid: str
    create: bool
    body: Mapping[str, Any]  # the full object to create, or the merge patch
    resource_version: str | None
    gains: bool  # it receives a partition or a higher epoch: written before the others lose


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapDelete:
    name: str
    uid: str
    pod: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodAnnotation:
    pod: str
    annotations: Mapping[str, str | None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Writes:
    maps: tuple[MapWrite, ...]
    deletes: tuple[MapDelete, ...]
    pods: tuple[PodAnnotation, ...]

    @property
    def count(self) -> int:
        return len(self.maps) + len(self.deletes) + len(self.pods)


def owned_by(
    assignment: Mapping[models.PartitionId, models.Ownership], pod: str
) -> dict[models.PartitionId, configmaps.PartitionEntry]:
    return {
        pid: configmaps.PartitionEntry(
            epoch=o.epoch, state=o.state, since=podstates.from_seconds(o.since)
        )
        for pid, o in assignment.items()
        if o.owner == pod
    }


def _owner_reference(pod: podstates.PodState) -> dict[str, Any]:
    # Kubernetes collects the ConfigMap with the pod; no blockOwnerDeletion (no finalizer RBAC).
    return {**POD_KIND, "name": pod.name, "uid": pod.uid, "controller": False}


def derive_writes(
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    assignment: Mapping[models.PartitionId, models.Ownership],
    maps: Sequence[StoredMap],
    pods: Mapping[str, podstates.PodState],
    pod_annotations: Mapping[str, Mapping[str, str]],
    problems: Mapping[str, tuple[str, ...]] = {},
) -> Writes:
    """Only what differs: an unchanged assignment gives no writes at all."""
    by_name = {cm.name: cm for cm in maps}
    # A pod's ConfigMap is found by the pod it is for (its data, else its label), so that one
    # written under an older naming scheme is updated in place rather than duplicated.
    by_pod: dict[str, StoredMap] = {}
    for stored in sorted(maps, key=lambda m: models.name_key(m.name)):
        by_pod.setdefault(stored.pod, stored)
    writes: list[MapWrite] = []
    deletes: list[MapDelete] = []
    annotate: list[PodAnnotation] = []
    wanted: set[str] = set()
    for pod in sorted(pods.values(), key=lambda p: models.name_key(p.name)):
        if pod.state is None:
            continue
        partitions = owned_by(assignment, pod.name)
        cm = by_name.get(configmaps.configmap_name(consumer=consumer, pod=pod.name))
        if cm is None:
            cm = by_pod.get(pod.name)
        name = (
            cm.name
            if cm is not None
            else configmaps.configmap_name(consumer=consumer, pod=pod.name)
        )
        if cm is None and not partitions and pod.state == "terminating":
            continue
        wanted.add(name)
        same_pod = (
            cm is not None and (not cm.pod_uid or cm.pod_uid == pod.uid) and cm.pod == pod.name
        )
        current = cm.data if (cm is not None and same_pod) else None
        if cm is not None and not same_pod:
            # Keep counting generations up: the pod may compare them across incarnations.
            current = {configmaps.KEY_GENERATION: str(cm.parsed.generation)}
        data = configmaps.desired_data(
            spec=spec, consumer=consumer, pod=pod.name, partitions=partitions, current=current
        )
        before = {
            pid: e.epoch for pid, e in (cm.parsed.partitions.items() if cm is not None else ())
        }
        gains = any(before.get(pid, -1) < e.epoch for pid, e in partitions.items())
        if cm is None:
            assert data is not None
            writes.append(
                MapWrite(
                    name=name,
                    pod=pod.name,
                    pod_uid=pod.uid,
                    create=True,
                    resource_version=None,
                    gains=gains,
                    body={
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": name,
                            "namespace": namespace,
                            "labels": configmaps.labels(consumer=consumer, pod=pod.name),
                            "annotations": {configmaps.ANNOTATION_POD_UID: pod.uid},
                            "ownerReferences": [_owner_reference(pod)],
                        },
                        "data": data,
                    },
                )
            )
        elif data is not None or not same_pod or cm.name in problems:
            if data is None:  # parsed cleanly but flagged (e.g. a claim it lost): rewrite
                data = configmaps.build_data(
                    spec=spec,
                    consumer=consumer,
                    pod=pod.name,
                    generation=cm.parsed.generation + 1,
                    partitions=partitions,
                )
            patch: dict[str, Any] = {
                "data": {**{k: None for k in cm.data if k not in data}, **data}
            }
            if not same_pod:
                patch["metadata"] = {
                    "annotations": {
                        configmaps.ANNOTATION_POD_UID: pod.uid,
                        configmaps.ANNOTATION_RELEASED: None,
                        configmaps.ANNOTATION_APPLIED_GENERATION: None,
                    },
                    "labels": configmaps.labels(consumer=consumer, pod=pod.name),
                    "ownerReferences": [_owner_reference(pod)],
                }
            writes.append(
                MapWrite(
                    name=name,
                    pod=pod.name,
                    pod_uid=pod.uid,
                    create=False,
                    resource_version=cm.resource_version or None,
                    gains=gains,
                    body=patch,
                )
            )
        if pod.state != "terminating":
            desired = configmaps.pod_annotations(consumer=consumer, partitions=partitions)
            current_annotations = pod_annotations.get(pod.name, {})
            has_ours = configmaps.POD_ANNOTATION_PARTITIONS in current_annotations
            differs = any(current_annotations.get(k) != v for k, v in desired.items())
            if differs and (partitions or has_ours):
                annotate.append(PodAnnotation(pod=pod.name, annotations=desired))
    for cm in sorted(maps, key=lambda m: models.name_key(m.name)):
        if cm.name not in wanted:
            deletes.append(MapDelete(name=cm.name, uid=cm.uid, pod=cm.pod))
    # Gaining ConfigMaps first: a crash in between leaves a duplicate claim that the higher
    # epoch resolves, never a partition that nobody remembers.
    writes.sort(key=lambda w: (not w.gains, models.name_key(w.name)))
    return Writes(maps=tuple(writes), deletes=tuple(deletes), pods=tuple(annotate))


# --- status ---


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a cycle concluded, for the status."""

    generation: int
    partitions: tuple[models.PartitionId, ...]
    pods: Mapping[str, podstates.PodState]
    assignment: Mapping[models.PartitionId, models.Ownership]
    floors: Mapping[models.PartitionId, int]
    owner_changes: int  # moves that gave a partition a new owner in this cycle
    balanced: bool
    grace_seconds: float
    conditions: tuple[conditions.Condition, ...]


def epochs(
    assignment: Mapping[models.PartitionId, models.Ownership],
    floors: Mapping[models.PartitionId, int],
    previous: Mapping[str, int],
) -> dict[str, int]:
    """The highest epoch per partition, never lower than before."""
    result = {str(k): int(v) for k, v in previous.items() if isinstance(v, int)}
    for pid, floor in floors.items():
        result[pid] = max(result.get(pid, 0), floor)
    for pid, o in assignment.items():
        result[pid] = max(result.get(pid, 0), o.epoch)
    return {k: result[k] for k in sorted(result, key=models.name_key)}


def build_status(
    *, outcome: Outcome, previous: specs.StatusBody, now: datetime.datetime
) -> specs.StatusBody:
    consumers: list[specs.ConsumerStatusBody] = []
    for pod in sorted(outcome.pods.values(), key=lambda p: models.name_key(p.name)):
        owned: list[str] = sorted(
            (p for p, o in outcome.assignment.items() if o.owner == pod.name), key=models.name_key
        )
        revoking = [
            p for p in owned if outcome.assignment[models.PartitionId(p)].state == "revoking"
        ]
        consumers.append(
            {
                "pod": pod.name,
                "ready": pod.ready,
                "state": pod.state or "finished",
                "partitions": list(owned),
                "revoking": revoking,
            }
        )
    handoffs = [
        {
            "partition": pid,
            "from": o.owner,
            "epoch": o.epoch,
            "since": specs.format_time(podstates.from_seconds(o.since)),
        }
        for pid, o in sorted(outcome.assignment.items(), key=lambda kv: models.name_key(kv[0]))
        if o.state == "revoking" and o.owner is not None
    ]
    now_seconds = podstates.to_seconds(now)
    member_count = sum(
        1
        for p in outcome.pods.values()
        if p.state == "ready"
        or (
            p.state == "notready"
            and now_seconds - podstates.to_seconds(p.since) < outcome.grace_seconds
        )
    )
    status: specs.StatusBody = {
        "observedGeneration": outcome.generation,
        "partitionCount": len(outcome.partitions),
        "memberCount": member_count,
        "consumers": consumers,
        "handoffs": handoffs,
        "epochs": epochs(outcome.assignment, outcome.floors, previous.get("epochs") or {}),
        "movesTotal": int(previous.get("movesTotal") or 0) + outcome.owner_changes,
        "conditions": conditions.apply(
            previous.get("conditions"),
            outcome.conditions,
            observed_generation=outcome.generation,
            now=now,
        ),
    }
    if outcome.owner_changes:
        status["lastRebalanceTime"] = specs.format_time(now)
    elif previous.get("lastRebalanceTime"):
        status["lastRebalanceTime"] = previous["lastRebalanceTime"]
    return status


def status_patch(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch from ``previous`` to ``desired`` (top-level keys; lists replace)."""
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if previous.get(key) != value:
            patch[key] = value
    return patch


# --- events ---


@dataclasses.dataclass(frozen=True, kw_only=True)
class Event:
    reason: str
    message: str
    type: str = "Normal"  # Normal | Warning


def _join(partitions: Sequence[str]) -> str:
    ordered = sorted(partitions, key=models.name_key)
    text = ", ".join(ordered[:16])
    return text + (f" and {len(ordered) - 16} more" if len(ordered) > 16 else "")


def move_events(moves: Sequence[models.Move]) -> list[Event]:
    """One Event per (reason, from, to), listing its partitions: few writes, readable history."""
    groups: dict[tuple[str, str, str | None, str | None], list[models.Move]] = {}
    for m in moves:
        if m.kind == "assign":
            reason = "PartitionAssigned"
        elif m.kind == "revoke":
            reason = "PartitionRevoked"
        elif m.target is None:
            reason = "PartitionUnassigned"
        elif m.reason == "timeout":
            reason = "HandoffTimedOut"
        elif m.reason == "released":
            reason = "PartitionHandedOff"
        else:
            reason = "PartitionTakenOver"
        groups.setdefault((reason, m.reason, m.source, m.target), []).append(m)
    events: list[Event] = []
    for (reason, why, source, target), group in groups.items():
        parts = _join([m.partition for m in group])
        epochs_text = ", ".join(str(m.epoch) for m in group[:16])
        plural = "s" if len(group) > 1 else ""
        if reason == "PartitionAssigned":
            text = f"Assigned partition{plural} {parts} to {target} (epoch {epochs_text})"
        elif reason == "PartitionRevoked":
            goal = f" for {target}" if target else ""
            text = (
                f"Revoking partition{plural} {parts} from {source} ({why}){goal}: "
                "waiting for its release"
            )
        elif reason == "PartitionUnassigned":
            text = (
                f"Partition{plural} {parts} of {source} ({why}) have no pod to go to: "
                "no Ready pod matches spec.selector"
            )
        elif reason == "HandoffTimedOut":
            text = (
                f"{source} did not release partition{plural} {parts} in time; assigned to "
                f"{target} (epoch {epochs_text}), the new epoch fences {source} out"
            )
        elif reason == "PartitionHandedOff":
            text = (
                f"{source} released partition{plural} {parts}; "
                f"assigned to {target} (epoch {epochs_text})"
            )
        else:
            text = (
                f"Took over partition{plural} {parts} of {source} ({why}) "
                f"for {target} (epoch {epochs_text})"
            )
        warning = reason in ("HandoffTimedOut", "PartitionUnassigned")
        events.append(Event(reason=reason, message=text, type="Warning" if warning else "Normal"))
    return events
