"""The Kubernetes Events a cycle posts: one per group of moves, repairs, dependency changes.

Events are for humans reading ``kubectl describe``: their reasons are specific
(``PartitionAssigned``, ``HandoffTimedOut``, ``EventHubUnreachable``), moves of the same kind
between the same pods are grouped into one Event, and a dependency's fault is reported when it
starts, not every cycle. The same holds for the partitions pods report in trouble
(`reports`): a Warning when a partition becomes failing, parked, stuck or lost (or changes
from one to another), a Normal ``PartitionRecovered`` when it is no longer reported.
`body` builds what the API takes; `handlers.writing` only posts it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eventhub_balancer.balancing import models, partitionlists
from eventhub_balancer.contracts import conditions as conditiontypes
from eventhub_balancer.contracts import podstates, specs, statusbodies, timestamps
from eventhub_balancer.reconciling import foreignreaders, lostblobs, progress, writes

#: The Event's source component, as ``kubectl describe`` shows it.
COMPONENT = "eventhub-balancer"
#: The longest message an Event carries, as events.k8s.io caps a note (core/v1, which the
#: operator posts to, takes longer ones): what ``kubectl describe`` shows in a few lines.
MAX_MESSAGE = 1024
#: Runs of partitions an Event names (``0-15, 17 and 14 more``; 16 runs fit `MAX_MESSAGE`).
NAMED_RUNS = 16
#: Why partitions released by pods that all stopped have no owner: as the spec wants.
STOPPED = "spec.selector matches is stopping or gone (scaled to zero, or all replaced at once)"
#: The store's faults the decision finds in what was read; every other one is a reader's.
DECIDED = frozenset({"CheckpointEpochTampered", "EpochOutOfRange", lostblobs.REASON})


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubeEvent:
    """A Kubernetes Event about the EventHubConsumer (not an Event Hubs event)."""

    reason: str
    message: str
    type: str = "Normal"  # Normal | Warning
    #: A reader of the shell logs what it says itself, paced (a dependency's fault and its
    #: end, a processor beside the pods): the cycle does not log it again.
    logged: bool = False


#: The reasons of the Events that `move_events` posts, one per (reason, from, to).
MOVES = frozenset(
    {
        "PartitionAssigned",
        "PartitionRevoked",
        "PartitionUnassigned",
        "PartitionReleased",
        "HandoffTimedOut",
        "PartitionHandedOff",
        "PartitionTakenOver",
    }
)


def join(partitions: Iterable[str]) -> str:
    """Partition ids as an Event names them: runs, the first `NAMED_RUNS`, the rest counted."""
    return partitionlists.named(partitions, NAMED_RUNS)


def move_events(
    moves: Sequence[models.Move],
    *,
    paused: bool = False,
    pods: Mapping[str, podstates.PodState] = {},
    left: frozenset[str] = frozenset(),
    now: float = 0.0,
    assignment: Mapping[models.PartitionId, models.Ownership] = {},
) -> list[KubeEvent]:
    """One Event per (reason, from, to), listing its partitions: few writes, readable history.

    While ``paused``, the planner drains every pod (`progress.paused_members`): those revokes say
    ``paused``, and a partition left without an owner is what the spec asks for, not a
    warning. A ``gone`` owner still among ``pods`` (NotReady or terminating past its grace at
    ``now``, or finished) is said to be what it is (`podstates.PodState.left`), as is one that
    ``left`` the selector; partitions released by pods all stopping wait as they should. Such
    a drain (paused, or every pod stopping) is said once a pod, at the release after which it
    holds nothing in ``assignment``: a pod releases its partitions in steps, as each is done."""
    holding = {o.owner for o in assignment.values()}
    groups: dict[tuple[str, str, str | None, str | None], list[models.Move]] = {}
    for m in moves:
        state = pods.get(m.source or "") if m.reason == "gone" else None
        why = m.reason if state is None else state.left(now=now)
        why = "no longer matches spec.selector" if why == "gone" and m.source in left else why
        if m.kind == "assign":
            reason = "PartitionAssigned"
        elif m.kind == "revoke":
            reason = "PartitionRevoked"
            why = "paused" if paused and m.reason == "drain" else why
        elif m.target is None and not paused:
            reason = "PartitionUnassigned"
        elif m.target is None and m.reason != "timeout":
            reason = "PartitionReleased"
        elif m.reason == "timeout":
            reason = "HandoffTimedOut"
        elif m.reason == "released":
            reason = "PartitionHandedOff"
        else:
            reason = "PartitionTakenOver"
        groups.setdefault((reason, why, m.source, m.target), []).append(m)
    events: list[KubeEvent] = []
    for (reason, why, source, target), group in groups.items():
        parts = join([m.partition for m in group])
        epochs = {str(m.epoch) for m in group}
        # One epoch for all (as almost always): said once, not once a partition.
        epochs_text = f"epochs {join(epochs)}" if len(epochs) > 1 else f"epoch {min(epochs)}"
        plural = "s" if len(group) > 1 else ""
        idle = (reason, why) == ("PartitionUnassigned", "released") and all(
            s.state in ("terminating", None) for s in pods.values()
        )
        drained = idle or (reason, why) == ("PartitionReleased", "released")
        if drained and source in holding:
            continue  # one step of a drain the spec asks for: said at the pod's last one
        why = f"{why}, the last it held" if drained else why
        if reason == "PartitionAssigned":
            text = f"Assigned partition{plural} {parts} to {target} ({epochs_text})"
        elif reason == "PartitionRevoked":
            goal = f" for {target}" if target else ""
            text = (
                f"Revoking partition{plural} {parts} from {source} ({why}){goal}: "
                "waiting for its release"
            )
        elif reason == "PartitionUnassigned":
            tail = f"every pod {STOPPED}" if idle else "no Ready pod matches spec.selector"
            text = (
                f"Partition{plural} {parts} of {source} ({why}) {'have' if plural else 'has'} "
                f"no pod to go to: {tail}"
            )
        elif reason == "PartitionReleased":
            text = (
                f"Partition{plural} {parts} of {source} ({why}) left without an owner: "
                "spec.paused is true"
            )
        elif reason == "HandoffTimedOut" and target is None:
            text = (
                f"{source} did not release partition{plural} {parts} in time; left without an "
                f"owner at {epochs_text}, the next owner's higher epoch fences {source} out"
            )
        elif reason == "HandoffTimedOut":
            text = (
                f"{source} did not release partition{plural} {parts} in time; assigned to "
                f"{target} ({epochs_text}), the new epoch fences {source} out"
            )
        elif reason == "PartitionHandedOff":
            text = (
                f"{source} released partition{plural} {parts}; assigned to {target} ({epochs_text})"
            )
        else:
            text = (
                f"Took over partition{plural} {parts} of {source} ({why}) "
                f"for {target} ({epochs_text})"
            )
        warning = reason == "HandoffTimedOut" or (reason == "PartitionUnassigned" and not idle)
        events.append(
            KubeEvent(reason=reason, message=text, type="Warning" if warning else "Normal")
        )
    return events


def build(
    *,
    plan: models.Plan,
    problems: Mapping[str, tuple[str, ...]],
    planned: writes.Writes,
    concluded: Sequence[conditiontypes.Condition],
    previous: statusbodies.StatusBody,
    tampered: Mapping[str, tuple[str, ...]] = {},
    paused: bool = False,
    pods: Mapping[str, podstates.PodState] = {},
    left: frozenset[str] = frozenset(),
    now: float = 0.0,
) -> list[KubeEvent]:
    """The moves (``pods`` as read at ``now`` say why an owner lost its partitions), the
    ConfigMaps rewritten to repair them, the dependencies lost or regained, a pause started,
    completed or ended.

    A ConfigMap whose data claims what the operator's record does not give its pod was changed
    by someone else (a pod has ``patch`` on ConfigMaps): ``AssignmentTampered``, not a repair.
    """
    events = move_events(
        plan.moves, paused=paused, pods=pods, left=left, now=now, assignment=plan.assignment
    )
    for cm_name, cm_problems in sorted(problems.items()):
        if any(w.name == cm_name for w in planned.maps) or any(
            d.name == cm_name for d in planned.deletes
        ):
            if cm_name in tampered:
                text = "; ".join(tampered[cm_name])[:900]
                events.append(
                    KubeEvent(
                        reason="AssignmentTampered",
                        type="Warning",
                        message=f"ConfigMap {cm_name}'s data was changed by someone other than "
                        f"the operator and is put back: {text}",
                    )
                )
                continue
            events.append(
                KubeEvent(
                    reason="ConfigMapRepaired",
                    type="Warning",
                    message=f"ConfigMap {cm_name} was rewritten: {'; '.join(cm_problems)[:900]}",
                )
            )
    for c in concluded:
        if (
            c.status == "False"
            and conditiontypes.changed(previous, c)
            and c.type
            in (conditiontypes.EVENTHUB_REACHABLE, conditiontypes.CHECKPOINT_STORE_REACHABLE)
        ):
            logged = c.reason not in DECIDED  # a reader's fault, said by the reader
            events.append(
                KubeEvent(reason=c.reason, message=c.message, type="Warning", logged=logged)
            )
        elif (
            c.status == "True"
            and c.type
            in (conditiontypes.EVENTHUB_REACHABLE, conditiontypes.CHECKPOINT_STORE_REACHABLE)
            and conditiontypes.was_false(previous, c)
        ):
            # The end of the fault its Warning told, under the condition's name (or the
            # processor's beside the pods, under its own).
            old = conditiontypes.find(previous.get("conditions"), c.type) or {}
            if c.type == conditiontypes.EVENTHUB_REACHABLE:
                end = KubeEvent(reason="EventHubReachable", message=c.message, logged=True)
            elif old.get("reason") == foreignreaders.REASON:
                gone = foreignreaders.GONE
                end = KubeEvent(reason=foreignreaders.REASON_GONE, message=gone, logged=True)
            else:
                end = KubeEvent(reason="CheckpointStoreReachable", message=c.message, logged=True)
            events.append(end)
        elif (
            c.type == conditiontypes.READY
            and c.reason in ("AssignmentNotApplied", "AssignmentNotWritten")
            and conditiontypes.changed(previous, c)
        ):
            events.append(KubeEvent(reason=c.reason, message=c.message, type="Warning"))
        elif c.type == conditiontypes.PAUSED and conditiontypes.changed(previous, c):
            events += pause_events(c, previous=previous)
    return events


def pause_events(
    c: conditiontypes.Condition, *, previous: statusbodies.StatusBody
) -> list[KubeEvent]:
    """``Pausing`` when a pause starts, ``Paused`` when it is complete, ``Resumed`` when it
    ends; nothing for a consumer that was never paused."""
    old = conditiontypes.find(previous.get("conditions"), conditiontypes.PAUSED)
    was = old.get("reason") if old is not None else None
    if c.reason == progress.PAUSING and was != progress.PAUSED:
        return [KubeEvent(reason="Pausing", message=c.message)]
    if c.reason == progress.PAUSED:
        return [KubeEvent(reason="Paused", message=c.message)]
    if c.reason == progress.RESUMED and was in (progress.PAUSED, progress.PAUSING):
        return [KubeEvent(reason="Resumed", message=c.message)]
    return []


def body(
    consumer: specs.ConsumerBody, event: KubeEvent, *, now: datetime.datetime
) -> dict[str, Any]:
    """The Event object about the EventHubConsumer ``consumer``, as the API takes it."""
    meta = consumer.get("metadata") or {}
    namespace = meta.get("namespace", "default")
    stamp = timestamps.format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # A prefix the API server accepts: it checks generateName as a name whose trailing '-'
        # stands for a letter ("orders." is refused, 422); long names leave room for it.
        "metadata": {
            "generateName": f"{str(meta.get('name', 'ehc'))[:200]}-",
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
            "kind": specs.KIND,
            "name": meta.get("name"),
            "namespace": namespace,
            "uid": meta.get("uid"),
        },
        "reason": event.reason,
        "message": conditiontypes.shorten(event.message, MAX_MESSAGE),
        "type": event.type,
        "source": {"component": COMPONENT},
        "reportingComponent": f"{specs.GROUP}/operator",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def with_squat_events(
    planned: writes.Writes, consumer: specs.ConsumerBody, *, now: datetime.datetime
) -> writes.Writes:
    """``planned`` with the Event each create posts if a ConfigMap the operator did not write
    holds its name already (`writes.squatter`): the cycle deletes that one, and creates the
    pod's own at the next attempt."""
    if not any(w.create for w in planned.maps):
        return planned
    maps = tuple(
        dataclasses.replace(
            w,
            squat_event=body(
                consumer,
                KubeEvent(
                    reason="AssignmentTampered",
                    message=(
                        f"ConfigMap {w.name}, the assignment of pod {w.pod}, was created by "
                        "someone else before the operator: not trusted, deleted, and created "
                        "again by the operator"
                    ),
                    type="Warning",
                ),
                now=now,
            ),
        )
        if w.create
        else w
        for w in planned.maps
    )
    return dataclasses.replace(planned, maps=maps)
