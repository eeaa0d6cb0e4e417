"""From the operator's own record to the planner's assignment: the read-back, pure.

Ownership and epochs come only from what consumers cannot write: the EventHubConsumer's
status (``status.assignment``: partition, pod, pod uid, epoch, state, since; ``status.epochs``:
the highest epoch given out) and the checkpoint blobs' epochs (a floor; with no status at
all, the ConfigMaps' epochs too: `held_floors`). The ConfigMaps are
the operator's *output*: a pod may write its acknowledgement annotations on its own, but what
its ``data`` says is compared with the record, never believed. A ConfigMap whose data claims
more than the record gives its pod is tampered with: it is put back (`writes`) and reported
(``AssignmentTampered``). A restarted operator reads the same status and resumes the same
assignment without a write.

When a cycle gives out a higher epoch, the record is written together with ``status.epochs``,
before any ConfigMap: a cycle that fails after that (a ConfigMap write that conflicts with a
pod's acknowledgement) leaves a record that agrees with the epochs, and the next cycle writes
the ConfigMaps it describes. An epoch above the record's (a checkpoint blob fenced above it, or
a status from an older operator that wrote the record last) means the record is stale for that
partition, which is then unowned at the higher epoch (its next owner fences above both) rather
than guessed from a ConfigMap. A status written by an older operator (no
``assignment``) is read from ``consumers[].partitions``, ``handoffs`` and ``epochs``.

A pod's partition reports are its own annotation, like its acknowledgements, and are never
tampering: they are read (`reports`) only for the partitions the record gives that pod, at
the recorded epoch; a partition reported lost is unowned at its epoch, so it is given out
again at the next one.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer import handoffs
from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import bounds, configmaps, podassignments, podstates, statusbodies
from eventhub_balancer.reconciling import fleets, observations, records, reports


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadBack:
    """The assignment as the operator recorded it, ready for the planner."""

    assignment: Mapping[models.PartitionId, models.Ownership]
    released: Mapping[models.PartitionId, int]
    #: the highest epoch known per partition (status, checkpoints)
    floors: Mapping[models.PartitionId, int]
    #: ConfigMap name -> what is wrong with it (it will be rewritten or deleted)
    problems: Mapping[str, tuple[str, ...]]
    #: ConfigMap name -> what its data claims beyond the record (a subset of ``problems``)
    tampered: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: inputs ignored because they are out of bounds, each naming where it came from
    ignored: tuple[str, ...] = ()
    #: the partitions their owners report in trouble, at the epoch recorded for them (those
    #: reported lost are unowned in ``assignment``: they are given out again)
    troubles: Mapping[models.PartitionId, reports.Trouble] = dataclasses.field(default_factory=dict)
    #: partitions reported lost at an epoch given out too recently (`reports.LOST_HOLD_SECONDS`):
    #: the moment each report is acted on
    lost_held: Mapping[models.PartitionId, float] = dataclasses.field(default_factory=dict)
    #: checkpoint blob epochs too far above the record to be adopted (`MAX_EPOCH_LEAP`), each
    #: naming its partition and the reset that clears it
    epoch_leaps: tuple[str, ...] = ()


def belongs(cm: observations.StoredMap, pods: Mapping[str, podstates.PodState]) -> bool:
    """Whether the ConfigMap is the current one of a pod that exists and has not finished."""
    pod = pods.get(cm.pod)
    if pod is None or pod.state is None:
        return False
    return not cm.pod_uid or cm.pod_uid == pod.uid


def ends_handoff(entry: podassignments.PartitionEntry, acknowledged: int | None) -> bool:
    """Whether the owner's acknowledgement ends its ownership of ``entry`` (the hand-off table
    in `handoffs` decides: only a release of the very epoch written counts; `read_back` says
    when an owned partition's release is trusted)."""
    state = handoffs.partition_state(
        entry.state, epoch=entry.epoch, acknowledged=acknowledged, waited=0.0, timeout=math.inf
    )
    return state == "released"


def revokes(cm: observations.StoredMap, pid: models.PartitionId, *, epoch: int) -> bool:
    """Whether ``cm``'s data (the operator's output) revokes ``pid`` at ``epoch``."""
    entry = cm.parsed.partitions.get(pid)
    return entry is not None and entry.state == "revoking" and entry.epoch == epoch


def let_go(
    cm: observations.StoredMap,
    pod: podstates.PodState | None,
    pid: models.PartitionId,
    *,
    epoch: int,
) -> bool:
    """Whether ``pod`` is terminating and ``cm`` (its current ConfigMap) gives it ``pid`` at
    ``epoch``: then its release of that epoch is final. A terminating pod's containers are
    never started again, and its runtime releases every partition on SIGTERM and runs none
    after (`consumer.runtime`). One release is not final: one written to switch coordinates
    moments before the deletion, while the pod had not yet said that it runs the partition
    again. Then the next owner's epoch fences that worker out, and its batch in flight may be
    processed twice: a failure's cost, not a planned move's."""
    if pod is None or pod.state != "terminating":
        return False
    entry = cm.parsed.partitions.get(pid)
    return entry is not None and entry.state == "owned" and entry.epoch == epoch


#: How far above the operator's own record (``status.epochs``) a checkpoint blob's epoch may be
#: without being reported. A blob is legitimately ahead when the status was lost (a recreated
#: EventHubConsumer starts from the blobs alone), by as many hand-offs as the consumer group
#: ever had: far fewer than 2^32. An epoch further ahead was written by someone who can write
#: the container.
MAX_EPOCH_LEAP = 2**32
#: The highest blob epoch adopted as a floor: above it too little of the epochs' range is left
#: for the owners to come (near 2^63 nobody can fence above it), so it is reported, not
#: adopted, and the partition stays unowned until the blob's epoch is lowered.
MAX_ADOPTED = bounds.MAX_FLOOR - MAX_EPOCH_LEAP


def floors_of(
    status_epochs: Mapping[str, Any],
    stored_epochs: Mapping[str, int],
    ignored: list[str],
    tampered: list[str] | None = None,
) -> dict[models.PartitionId, int]:
    """The highest epoch known per partition: the status's, raised by the blobs'. A blob epoch
    more than `MAX_EPOCH_LEAP` above the status's is reported in ``tampered`` (in ``ignored``
    when None): still adopted while it leaves room (`MAX_ADOPTED`), so the partition goes on
    being processed; above that not adopted. Out-of-range values go to ``ignored``. Each
    finding names where it came from and what clears it."""
    leaps = tampered if tampered is not None else ignored
    floors: dict[models.PartitionId, int] = {}
    for where, source in (("status.epochs", status_epochs), ("checkpoint blob", stored_epochs)):
        for pid, epoch in source.items():
            if not bounds.is_partition_id(pid):
                ignored.append(f"{where}: partition id {str(pid)[:20]!r} is not one")
                continue
            if not bounds.is_floor(epoch):
                ignored.append(
                    f"{where} of partition {pid}: epoch {str(epoch)[:40]} is out of range "
                    f"(0..{bounds.MAX_FLOOR}); reset it"
                )
                continue
            key = models.PartitionId(pid)
            known = floors.get(key, 0)
            if where == "checkpoint blob" and int(epoch) - known > MAX_EPOCH_LEAP:
                adopted = int(epoch) <= MAX_ADOPTED
                leaps.append(
                    f"the checkpoint blob of partition {pid} holds epoch {epoch}, more than "
                    f"{MAX_EPOCH_LEAP} above the highest the operator gave out ({known}): "
                    "only someone who can write the container puts it there, find out who; "
                    + (
                        "adopted, so the partition goes on being processed"
                        if adopted
                        else f"not adopted (above {MAX_ADOPTED} the owners to come would "
                        "soon find no epoch left above it), so its owners are fenced out until "
                        "the blob's epoch metadata is lowered by hand while the consumer is "
                        "paused"
                    )
                )
                if not adopted:
                    continue
            floors[key] = max(known, int(epoch))
    return floors


def held_floors(
    floors: dict[models.PartitionId, int], maps: Sequence[observations.StoredMap]
) -> None:
    """Raise ``floors`` to the epochs the ConfigMaps hold, for a consumer whose status holds
    none: one deleted and applied again (or restored without its status) while its pods run.
    A pod given an epoch it has not fenced yet (its container restarting, its store slow)
    holds it only in its ConfigMap; the blobs alone would hand that epoch to another pod. Only
    then: once the record exists, a ConfigMap's data is compared with it, never believed."""
    for cm in maps:
        for pid, entry in cm.parsed.partitions.items():
            if bounds.is_floor(entry.epoch) and entry.epoch <= MAX_ADOPTED:
                floors[pid] = max(floors.get(pid, 0), entry.epoch)


def read_back(
    *,
    maps: Sequence[observations.StoredMap],
    pods: Mapping[str, podstates.PodState],
    status: statusbodies.StatusBody,
    stored_epochs: Mapping[str, int],
    now: datetime.datetime,
    fleet: fleets.Fleet | None = None,
    recorded: Mapping[models.PartitionId, records.Recorded] | None = None,
    blobs_unreadable: bool = False,
) -> ReadBack:
    """The assignment from the status record, the floors, and what the ConfigMaps got wrong.

    ``fleet``: ``maps`` and ``pods`` as a `fleets.Fleet`, whose sums (each pod's current
    ConfigMap, the pods reporting trouble) stand for a pass over them. ``recorded``:
    `records.read` of ``status``, when the caller has it already. ``blobs_unreadable``: the
    store failed, so a partition reported lost stays with its pod (`reports.unassign_lost`)."""
    ignored: list[str] = []
    status_epochs: Mapping[str, Any] = status.get("epochs") or {}
    leaps: list[str] = []
    floors = floors_of(status_epochs, stored_epochs, ignored, leaps)
    if not status_epochs:
        held_floors(floors, maps)
    if recorded is None:
        recorded = records.read(status)
    seconds_now = podstates.to_seconds(now)
    if fleet is not None:
        current: Mapping[str, observations.StoredMap] = fleet.current
    else:
        current = {
            cm.pod: cm
            for cm in sorted(maps, key=lambda m: models.name_key(m.name), reverse=True)
            if belongs(cm, pods)
        }

    assignment: dict[models.PartitionId, models.Ownership] = {}
    released: dict[models.PartitionId, int] = {}
    # Each pod's acknowledgements, read once for all its partitions.
    acknowledgements: dict[str, Mapping[models.PartitionId, int]] = {}
    for pid, entry in recorded.items():
        floor = floors.get(pid, 0)
        # A moment after this clock's now was read on a clock ahead of it (an operator before
        # this one, on another node, or before NTP stepped this one back): it counts from now,
        # and the record written back says so, or a hand-off would wait out the difference.
        since = seconds_now if entry.since is None else min(entry.since, seconds_now)
        pod = pods.get(entry.pod)
        if entry.epoch < floor:
            # The epoch went up after this record (an interrupted cycle, or a blob ahead):
            # nobody is known to hold it; its next owner fences above the floor.
            assignment[pid] = models.Ownership(owner=None, epoch=floor, since=seconds_now)
            continue
        floors[pid] = entry.epoch
        if pod is not None and pod.state is not None and entry.pod_uid not in ("", pod.uid):
            # A new pod under an old name (a StatefulSet): the new incarnation must fence
            # with a new epoch, so the partition is unowned at its old epoch.
            assignment[pid] = models.Ownership(owner=None, epoch=entry.epoch, since=since)
            continue
        assignment[pid] = models.Ownership(
            owner=models.MemberName(entry.pod), epoch=entry.epoch, state=entry.state, since=since
        )
        cm = current.get(entry.pod)
        acknowledged = None
        if cm is not None:
            if entry.pod not in acknowledgements:
                acknowledgements[entry.pod] = configmaps.parse_released(cm.annotations)
            acknowledged = acknowledgements[entry.pod].get(pid)
        # An acknowledgement counts only for the very epoch assigned (never one above it),
        # and only once the pod's ConfigMap revokes the partition at that epoch: a release
        # written ahead of the revocation was dropped by the write that carries it
        # (`writes.premature`), and until that write is done it does not count either. The
        # exception is a terminating pod (`let_go`): it released everything on its SIGTERM
        # and never runs a partition again, so its release ends the partition's ownership
        # without a revocation and a second cycle that waits for the pod to answer it.
        written = podassignments.PartitionEntry(epoch=entry.epoch, state=entry.state)
        if (
            acknowledged is not None
            and cm is not None
            and ends_handoff(written, acknowledged)
            and (revokes(cm, pid, epoch=entry.epoch) or let_go(cm, pod, pid, epoch=entry.epoch))
        ):
            released[pid] = acknowledged
    for pid, floor in floors.items():
        if pid not in assignment and floor > 0:
            assignment[pid] = models.Ownership(owner=None, epoch=floor, since=seconds_now)
    troubles = reports.read(
        maps=current,
        assignment=assignment,
        reporting=fleet.reporting if fleet is not None else None,
    )
    assignment, held = reports.unassign_lost(
        assignment, troubles, now=seconds_now, blobs_unreadable=blobs_unreadable
    )
    for pid, trouble in troubles.items():
        if trouble.state == "lost" and pid not in held:
            released.pop(pid, None)
    found = fleets.configmap_faults(maps, recorded, status_epochs)
    return ReadBack(
        assignment=assignment,
        released=released,
        floors=floors,
        problems=found.problems,
        tampered=found.tampered,
        ignored=tuple(ignored),
        troubles=troubles,
        lost_held=held,
        epoch_leaps=tuple(leaps),
    )


#: How soon a decision that could not tell whether a pod is gone asks again for the pods to be
#: listed afresh, when the listing it was given could not tell either (`unconfirmed`).
CONFIRM_SECONDS = 5.0


def unconfirmed(
    fleet: fleets.Fleet,
    recorded: Mapping[models.PartitionId, records.Recorded],
    departures: observations.Departures,
    *,
    record_version: int | None,
) -> frozenset[str]:
    """The pods the record gives a partition, or a ConfigMap is written for, that the pods as
    read lack and that are not known to be gone (`observations.Departures`): a cache that has
    not been shown them yet (its pod watch lags) must not make them gone. With them, the pods
    the record gives a partition that the pods as read have but whose ConfigMap was deleted
    since the pods were last listed: it went with its pod, most likely, and a pod watch that
    lags must not keep the partitions on a pod that is gone, nor have its ConfigMap written
    again. ``record_version``: the version of the CR the record was read from."""
    if departures.uncached:
        return frozenset()
    present = fleet.states
    unknown: set[str] = set()
    for pod in {entry.pod for entry in recorded.values()}:
        read = fleet.pods.get(pod)
        if read is None:
            if not departures.gone(pod, seen_at=record_version):
                unknown.add(pod)
        elif pod not in fleet.by_pod and not departures.confirmed(pod, map_name=read.map_name):
            unknown.add(pod)
    for cm in fleet.stored.values():
        if cm.pod and cm.pod not in present and cm.pod not in unknown:
            version = int(cm.resource_version) if cm.resource_version.isdigit() else None
            if not departures.gone(cm.pod, seen_at=version):
                unknown.add(cm.pod)
    return frozenset(unknown)


#: How long a pod may take to say it applied what its ConfigMap gives it before the pods are
#: listed afresh to confirm that it exists: a live pod applies within a second, a pod the
#: cache still shows after it left never does (`unacknowledged`).
ACK_CONFIRM_SECONDS = 3.0


def unacknowledged(
    fleet: fleets.Fleet, departures: observations.Departures, *, wall: float
) -> tuple[frozenset[str], tuple[float, ...]]:
    """The pods given partitions that have not said they applied their ConfigMap for
    `ACK_CONFIRM_SECONDS` and were not listed since it was written: each may be a pod that
    left while the cache still shows it, and is confirmed by listing the pods afresh. With
    them, the moments at which the others' silence comes due."""
    if departures.uncached:
        return frozenset(), ()
    due: list[float] = []
    owing: set[str] = set()
    for pod, cm in fleet.current.items():
        times = [e.since for e in cm.parsed.partitions.values() if e.since is not None]
        applied = configmaps.parse_applied_generation(cm.annotations)
        if not times or (applied is not None and applied >= cm.parsed.generation):
            continue
        written = int(cm.resource_version) if cm.resource_version.isdigit() else None
        if written is not None and departures.listed is not None and departures.listed >= written:
            continue  # listed since it was written: the pod exists
        deadline = max(podstates.to_seconds(t) for t in times) + ACK_CONFIRM_SECONDS
        if wall >= deadline:
            owing.add(pod)
        else:
            due.append(deadline)
    return frozenset(owing), tuple(due)


def members(pods: Mapping[str, podstates.PodState]) -> tuple[models.Member, ...]:
    return tuple(
        models.Member(
            name=models.MemberName(p.name), state=p.state, since=podstates.to_seconds(p.since)
        )
        for p in sorted(pods.values(), key=lambda p: models.name_key(p.name))
        if p.state is not None
    )


def planned_partitions(
    listed: tuple[str, ...] | None, back: ReadBack, *, gone: bool = False
) -> tuple[tuple[models.PartitionId, ...], tuple[models.PartitionId, ...]]:
    """The partitions to plan over, and those kept although Event Hubs did not list them.

    ``gone``: the list is the answer of a hub other than the one some pods still read (a
    change of coordinates): what it does not list does not exist there, and is dropped."""
    if listed is None:
        # Never seen the Event Hub: plan only over what is assigned, so that failover works.
        known = set(back.floors) | set(back.assignment)
        return tuple(planning.ordered_partitions(known)), ()
    ids = [models.PartitionId(p) for p in listed]
    # Event Hubs partitions never go away; a shorter list from the same hub is a wrong answer,
    # not a reason to revoke what is owned (an unowned one waits for a list that has it).
    owned = {p for p, o in back.assignment.items() if o.owner is not None}
    missing = set() if gone else owned - set(ids)
    if not missing:
        return tuple(ids), ()
    return (
        tuple(planning.ordered_partitions([*ids, *missing])),
        tuple(planning.ordered_partitions(missing)),
    )
