"""The EventHubConsumer's status as a cycle concludes it, and the patch that gets it there.

Only top-level fields that differ go into the patch, so a steady state writes nothing.
``assignment`` is the operator's record of who owns what (partition, pod, pod uid, epoch,
state, since): the one source of ownership a restarted operator reads back (`readbacks`),
kept in the status because consumer pods cannot write it.
``epochs`` never go down (`epochs`): the highest epoch given out per partition survives lost
ConfigMaps and operator restarts, and is written before any ConfigMap that uses it.
``failing`` lists the partitions their pods report in trouble (`reports`), always present
(empty when none) so that a merge patch clears it.

The status is built whole in every cycle (a merge patch of the fields that differ), but the
times in it are formatted once per value (`TIMES`) and names sort by their cached keys
(`models.name_key`): a steady cycle builds the same lists out of lookups.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, conditions, podstates, specs
from eventhub_balancer.reconciling import memos, reports


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


#: Each time as the status writes it (`specs.format_time`), by its seconds.
TIMES: memos.Cache[float, str] = memos.Cache()


def time_text(seconds: float) -> str:
    """``seconds`` as the status writes a time, formatted once per value."""
    return TIMES.get(seconds, lambda s: specs.format_time(podstates.from_seconds(s)))


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


def build_status(
    *, outcome: Outcome, previous: specs.StatusBody, now: datetime.datetime
) -> dict[str, Any]:
    consumers: list[specs.ConsumerStatusBody] = []
    # Each owner's partitions in one pass: a cycle's cost stays linear in the fleet.
    by_owner: dict[str, list[str]] = {}
    for p, o in outcome.assignment.items():
        if o.owner is not None:
            by_owner.setdefault(o.owner, []).append(p)
    for pod in sorted(outcome.pods.values(), key=lambda p: models.name_key(p.name)):
        owned: list[str] = sorted(by_owner.get(pod.name, ()), key=models.name_key)
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
    ordered = sorted(outcome.assignment.items(), key=lambda kv: models.name_key(kv[0]))
    handoffs = [
        {
            "partition": pid,
            "from": o.owner,
            "epoch": o.epoch,
            "since": time_text(o.since),
        }
        for pid, o in ordered
        if o.state == "revoking" and o.owner is not None
    ]
    record: list[specs.AssignmentEntryBody] = [
        {
            "partition": pid,
            "pod": o.owner,
            "podUid": outcome.pods[o.owner].uid if o.owner in outcome.pods else "",
            "epoch": o.epoch,
            "state": o.state,
            "since": time_text(o.since),
        }
        for pid, o in ordered
        if o.owner is not None
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
        "assignment": record,
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
    # Not a key of `specs.StatusBody` (a shared contract): added beside it.
    failing = reports.status_entries(outcome.troubles, previous=previous, now=now)
    return {**status, reports.STATUS_FIELD: failing}


def status_patch(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch from ``previous`` to ``desired`` (top-level keys; lists replace)."""
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if previous.get(key) != value:
            patch[key] = value
    return patch
