"""The EventHubConsumer's status as a cycle concludes it, and the patch that gets it there.

Only top-level fields that differ go into the patch, so a steady state writes nothing.
``assignment`` is the operator's record of who owns what (partition, pod, pod uid, epoch,
state, since): the one source of ownership a restarted operator reads back (`readbacks`),
kept in the status because consumer pods cannot write it.
``epochs`` never go down (`epochs`): the highest epoch given out per partition survives lost
ConfigMaps and operator restarts, and is written before any ConfigMap that uses it.
``failing`` lists the partitions their pods report in trouble (`reports`), always present
(empty when none) so that a merge patch clears it; ``failingCount`` is its length, for the
FAILING column of ``kubectl get`` (a printer column cannot count a list).

The status is built whole in every cycle, and the patch holds the fields that differ.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, conditions, podstates, statusbodies, timestamps
from eventhub_balancer.reconciling import progress, reports


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
    #: the partitions their owners report in trouble
    troubles: Mapping[models.PartitionId, reports.Trouble] = dataclasses.field(default_factory=dict)
    #: the member count from the fleet's sums; None: counted here over ``pods``
    member_count: int | None = None
    #: ``epochs`` as the cycle already concluded them (`epochs`); None: concluded here
    epochs: Mapping[str, int] | None = None


def time_text(seconds: float) -> str:
    """``seconds`` as the status writes a time."""
    return timestamps.format_time(podstates.from_seconds(seconds))


def epochs(
    assignment: Mapping[models.PartitionId, models.Ownership],
    floors: Mapping[models.PartitionId, int],
    previous: Mapping[str, int],
) -> dict[str, int]:
    """The highest epoch per partition, never lower than before."""
    result = {str(k): int(v) for k, v in previous.items() if bounds.is_epoch(v)}
    for pid, floor in floors.items():
        result[pid] = max(result.get(pid, 0), floor)
    for pid, o in assignment.items():
        result[pid] = max(result.get(pid, 0), o.epoch)
    return {k: result[k] for k in sorted(result, key=models.name_key)}


def consumer_entry(
    pod: podstates.PodState, owned: Iterable[tuple[str, models.OwnershipState]]
) -> statusbodies.ConsumerStatusBody:
    """One pod's entry of ``status.consumers``, from its partitions and their states."""
    ordered = sorted(owned, key=lambda po: models.name_key(po[0]))
    return {
        "pod": pod.name,
        "ready": pod.ready,
        "state": pod.state or "finished",
        "partitions": [p for p, _ in ordered],
        "revoking": [p for p, state in ordered if state == "revoking"],
    }


def consumer_entries(
    pods: Mapping[str, podstates.PodState],
    assignment: Mapping[models.PartitionId, models.Ownership],
) -> list[statusbodies.ConsumerStatusBody]:
    """``status.consumers``: every pod's entry, by name."""
    # Each owner's partitions in one pass: a cycle's cost stays linear in the fleet.
    by_owner: dict[str, list[tuple[str, models.OwnershipState]]] = {}
    for p, o in assignment.items():
        if o.owner is not None:
            by_owner.setdefault(o.owner, []).append((p, o.state))
    return [
        consumer_entry(pod, by_owner.get(pod.name, ()))
        for pod in sorted(pods.values(), key=lambda p: models.name_key(p.name))
    ]


def build_status(
    *, outcome: Outcome, previous: statusbodies.StatusBody, now: datetime.datetime
) -> dict[str, Any]:
    consumers = consumer_entries(outcome.pods, outcome.assignment)
    ordered = sorted(outcome.assignment.items(), key=lambda kv: models.name_key(kv[0]))
    # Most partitions share a few moments (those of the cycles that gave them out): each is
    # formatted once per status.
    texts: dict[float, str] = {}

    def text(seconds: float) -> str:
        if seconds not in texts:
            texts[seconds] = time_text(seconds)
        return texts[seconds]

    handoffs = [
        {
            "partition": pid,
            "from": o.owner,
            "epoch": o.epoch,
            "since": text(o.since),
        }
        for pid, o in ordered
        if o.state == "revoking" and o.owner is not None
    ]
    record: list[statusbodies.AssignmentEntryBody] = [
        {
            "partition": pid,
            "pod": o.owner,
            "podUid": outcome.pods[o.owner].uid if o.owner in outcome.pods else "",
            "epoch": o.epoch,
            "state": o.state,
            "since": text(o.since),
        }
        for pid, o in ordered
        if o.owner is not None
    ]
    now_seconds = podstates.to_seconds(now)
    members = outcome.member_count
    if members is None:
        members = member_count(outcome.pods, now=now_seconds, grace=outcome.grace_seconds)
    status: statusbodies.StatusBody = {
        "observedGeneration": outcome.generation,
        "partitionCount": len(outcome.partitions),
        "memberCount": members,
        "consumers": consumers,
        "handoffs": handoffs,
        "epochs": dict(outcome.epochs)
        if outcome.epochs is not None
        else epochs(outcome.assignment, outcome.floors, previous.get("epochs") or {}),
        "assignment": record,
        "movesTotal": int(previous.get("movesTotal") or 0) + outcome.owner_changes,
        "conditions": progress.applied(
            previous.get("conditions"),
            outcome.conditions,
            observed_generation=outcome.generation,
            now=now,
        ),
    }
    if outcome.owner_changes:
        status["lastRebalanceTime"] = timestamps.format_time(now)
    elif previous.get("lastRebalanceTime"):
        status["lastRebalanceTime"] = previous["lastRebalanceTime"]
    # Not keys of `statusbodies.StatusBody` (a shared contract): added beside it.
    failing = reports.status_entries(outcome.troubles, previous=previous, now=now)
    return {**status, reports.STATUS_FIELD: failing, reports.COUNT_FIELD: len(failing)}


def member_count(
    pods: Mapping[str, podstates.PodState],
    *,
    now: float,
    grace: float,
    ready: int | None = None,
    notready: Iterable[str] | None = None,
) -> int:
    """The pods that count as members: Ready, or NotReady within their grace. ``ready`` and
    ``notready``: the fleet's sums of the pods' states; None: counted over ``pods``."""
    if ready is None:
        ready = sum(1 for p in pods.values() if p.state == "ready")
    if notready is None:
        notready = [name for name, p in pods.items() if p.state == "notready"]
    since = podstates.to_seconds
    return ready + sum(1 for name in notready if now - since(pods[name].since) < grace)


def status_patch(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch from ``previous`` to ``desired`` (top-level keys; lists replace)."""
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if previous.get(key) != value:
            patch[key] = value
    return patch
