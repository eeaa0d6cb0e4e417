"""What a decision reports, pure: the EventHubConsumer's status as a cycle concludes it (and
the patch that gets it there), and the cycle's figures for Prometheus.

The status is built whole in every cycle, and the patch holds only the top-level fields that
differ, so a steady state writes nothing. ``assignment`` is the operator's record of who owns
what (partition, pod, pod uid, epoch, state, since): the one source of ownership a restarted
operator reads back (`readbacks`), kept in the status because consumer pods cannot write it.
``epochs`` never go down (`epochs`): the highest epoch given out per partition survives lost
ConfigMaps and operator restarts, and is written before any ConfigMap that uses it.
``failing`` lists the partitions their pods report in trouble (`reports`), always present
(empty when none) so that a merge patch clears it; ``failingCount`` is its length, for the
FAILING column of ``kubectl get`` (a printer column cannot count a list).

The figures (`Figures`, `build_figures`) are plain numbers computed here, from the plan and what was
read, so that they are tested as data and `handlers.metrics` stays a registry of instruments
that only sets them.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Iterable, Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, conditions, podstates, statusbodies, timestamps
from eventhub_balancer.reconciling import progress, readbacks, reports


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
    """``seconds`` as the status writes a moment of ownership (to the millisecond)."""
    return timestamps.format_moment(podstates.from_seconds(seconds))


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
        # None (the field removed): no list read yet; no Event Hub has 0 partitions.
        "partitionCount": len(outcome.partitions) or None,
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


#: The reported states whose partition more pods cannot move on: its owner keeps it (failing,
#: stuck) or it waits for a person (parked). A lost one is given out again at once.
STALLED = frozenset({"failing", "parked", "stuck"})


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
    #: events not yet checkpointed over the partitions more pods would help (not those in
    #: `STALLED` troubles); None when not read this cycle, or paused
    backlog: int | None = None
    #: pods an autoscaler should run (`recommended_replicas`), from the backlog when known; at
    #: least the pods that hold a stalled partition
    recommended_replicas: int = 0
    #: ``spec.paused``: its partitions are unowned on purpose
    paused: bool = False


def build_figures(
    *,
    plan: models.Plan,
    before: readbacks.ReadBack,
    wall: float,
    partitions: tuple[models.PartitionId, ...],
    hub_ok: bool,
    lag: Mapping[models.PartitionId, int] | None = None,
    paused: bool = False,
    members: int | None = None,
) -> Figures:
    """The figures of one cycle; ``lag`` (events not yet checkpointed per partition) when the
    cycle read both the hub's last sequence numbers and the checkpoints, else None or empty.
    ``members``: the pods that count as members (`member_count`), which a recommendation
    without a backlog keeps; None: the plan's live members."""
    per_pod: dict[str, int] = {}
    for o in plan.assignment.values():
        if o.owner is not None:
            per_pod[o.owner] = per_pod.get(o.owner, 0) + 1
    handoffs: list[tuple[str, float]] = []
    for m in plan.moves:
        old = before.assignment.get(m.partition)
        if m.kind == "takeover" and m.reason in ("released", "timeout") and old is not None:
            handoffs.append((m.reason, max(0.0, wall - old.since)))
    troubled = reports.standing(before.troubles, plan.assignment)
    # Partitions their pods report failing, parked or stuck stay with those pods, and their
    # backlog grows whatever the pod count: no reason for more pods, nor for fewer than hold
    # them. Paused, every backlog grows on purpose. An empty lag: nothing read, not zero.
    stalled = {p: t.pod for p, t in troubled.items() if t.state in STALLED}
    backlog = sum(n for p, n in lag.items() if p not in stalled) if lag and not paused else None
    return Figures(
        per_pod=per_pod,
        partition_count=len(partitions),
        members=len(plan.targets),
        balanced=plan.balanced,
        handoffs_in_flight=sum(1 for o in plan.assignment.values() if o.state == "revoking"),
        eventhub_reachable=hub_ok,
        moves=tuple((m.kind, m.reason) for m in plan.moves),
        handoffs=tuple(handoffs),
        troubled=reports.counts(troubled),
        backlog=backlog,
        recommended_replicas=max(
            len(set(stalled.values())),
            recommended_replicas(
                partitions=len(partitions),
                backlog=backlog,
                members=len(plan.targets) if members is None else members,
            ),
        ),
        paused=paused,
    )
