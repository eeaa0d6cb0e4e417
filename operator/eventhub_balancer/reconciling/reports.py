"""The pods' partition reports as the operator reads them, shows them and acts on them, pure.

A failure stays with the partition that failed (see `contracts.partitionreports`): a pod
whose handler keeps failing on one partition stays Ready, so the planner keeps that partition
where it is; moving it would only carry the poison batch to the next pod. What the operator
does with a report is to make it visible: the status lists the troubled partitions
(``status.failing``), the condition ``PartitionsFailing`` names them, an Event marks each
change and a metric counts them.

One state is acted on: ``lost``. A pod reports a partition lost when it finds it taken at
the very epoch the operator gave it (a higher epoch in Event Hubs or in the checkpoint blob).
Nobody processes such a partition, and nothing else would ever say so; the read-back treats
it as unowned at its epoch (`unassign_lost`), so the planner gives it out again at epoch + 1
in the same cycle (above the checkpoint blob's epoch too, which a new owner's decision reads).
Once the epoch is raised, the report (written for the old epoch) no longer counts, so the
report is acted on once. A report about an epoch given out less than `LOST_HOLD_SECONDS`
ago waits until then: a pod that reports every new epoch lost at once (it keeps finding the
partition taken, or it lies) raises the epoch once per hold, not once per cycle, and each of
those cycles writes the status and a ConfigMap and makes the pod fence again.

A report is the pod's word, so it is read only for what the operator assigned to that pod, at
that epoch (`partitionreports.parse` with ``current``): a pod cannot report on, or get moved,
another pod's partitions.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from eventhub_balancer.balancing import models, partitionlists
from eventhub_balancer.contracts import bounds, conditions, partitionreports, timestamps
from eventhub_balancer.reconciling import observations

#: The status field that lists the troubled partitions, and the one that counts them.
STATUS_FIELD = "failing"
COUNT_FIELD = "failingCount"
#: Entries of ``status.failing`` that keep their error text: enough to see what broke; a fleet
#: with every partition failing (a bad deployment) would otherwise carry a thousand copies of
#: the same message in the status.
MAX_ERRORS_LISTED = 32
#: Runs of partitions named per group of the condition's message (``0-7, 9``; the partitions
#: past them are counted), and groups of troubles (one state, one error) described in one Event.
MAX_NAMED = 8
#: Pods named per group of troubles in the condition's message; the rest are counted.
MAX_PODS_NAMED = 3
#: The condition's message is never longer (`conditions.shorten`).
MAX_MESSAGE = conditions.MAX_MESSAGE

#: How long an epoch given out stands before a report that it was lost gives the partition
#: out again: long enough that a pod reporting every new epoch lost does not turn the cycle
#: into a loop of epoch rises (each one woken by the pod's next report), short next to the
#: time nobody processes a partition that was really taken.
LOST_HOLD_SECONDS = 30.0

#: The Event reason per reported state.
EVENT_REASONS: Mapping[str, str] = types.MappingProxyType(
    {
        "failing": "PartitionFailing",
        "parked": "PartitionParked",
        "stuck": "PartitionStuck",
        "lost": "PartitionLost",
    }
)


class FailingEntryBody(TypedDict, total=False):
    """One entry of ``status.failing``."""

    partition: str
    pod: str
    epoch: int
    state: str
    attempts: int
    error: str
    since: str
    restarting: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trouble:
    """A partition in trouble, as its owner reported it for the epoch it was given."""

    partition: models.PartitionId
    pod: str
    epoch: int
    state: partitionreports.ReportState
    attempts: int = 0
    error: str = ""
    #: its worker starts again (`partitionreports.PartitionReport.restarting`): no batch fails
    restarting: bool = False

    @property
    def key(self) -> tuple[str, str, int, str]:
        """What identifies a trouble across cycles: a change of any of these is news."""
        return (self.partition, self.pod, self.epoch, self.state)

    @property
    def shape(self) -> str:
        """The error in the words every partition that meets it shares: ``partition 7`` said as
        ``each partition``, ids made at each attempt as ``*`` (`partitionreports.without_ids`)."""
        said = re.sub(rf"\bpartition {re.escape(self.partition)}\b", "each partition", self.error)
        return partitionreports.without_ids(said)


def read(
    *,
    maps: Mapping[str, observations.StoredMap],
    assignment: Mapping[models.PartitionId, models.Ownership],
    reporting: Iterable[str] | None = None,
) -> dict[models.PartitionId, Trouble]:
    """The reports that count: each pod's (``maps``: its current ConfigMap by pod name) about
    the partitions ``assignment`` gives it, at the epoch it gives them. ``reporting``: the
    only pods whose ConfigMap carries reports (`fleets.Fleet.reporting`); None: any may."""
    given = models.epochs_given(assignment, reporting)
    troubles: dict[models.PartitionId, Trouble] = {}
    for pod in sorted(given, key=models.name_key):
        cm = maps.get(pod)
        if cm is None:
            continue
        for partition, report in partitionreports.parse(cm.annotations, current=given[pod]).items():
            if report.state is not None:  # `parse` reads troubles only
                key = models.PartitionId(partition)
                troubles[key] = Trouble(
                    partition=key,
                    pod=pod,
                    epoch=report.epoch,
                    state=report.state,
                    attempts=report.attempts,
                    error=report.error,
                    restarting=report.restarting,
                )
    return {k: troubles[k] for k in sorted(troubles, key=models.name_key)}


def unassign_lost(
    assignment: Mapping[models.PartitionId, models.Ownership],
    troubles: Mapping[models.PartitionId, Trouble],
    *,
    now: float,
    blobs_unreadable: bool = False,
) -> tuple[dict[models.PartitionId, models.Ownership], dict[models.PartitionId, float]]:
    """``assignment`` with each partition reported lost made unowned at its epoch: the
    planner places it again at epoch + 1, like the partition of a pod that is gone. A report
    about an epoch given out less than `LOST_HOLD_SECONDS` before ``now`` waits: the second
    value says, per such partition, the moment it is acted on. While the checkpoint blobs
    cannot be read (``blobs_unreadable``) every report waits, with no moment: a higher epoch
    holds the partition, and only its blob says how high (raised by one blind, each report
    was refused again, until one reached the blob's own epoch and took it over)."""
    result = dict(assignment)
    held: dict[models.PartitionId, float] = {}
    for pid, trouble in troubles.items():
        if trouble.state != "lost" or pid not in result or blobs_unreadable:
            continue
        # Revoking, its ``since`` is when the hand-off began, not when the epoch was given.
        due = result[pid].since + LOST_HOLD_SECONDS
        if result[pid].state == "owned" and now < due:
            held[pid] = due
            continue
        result[pid] = models.Ownership(owner=None, epoch=trouble.epoch, since=now)
    return result, held


def standing(
    troubles: Mapping[models.PartitionId, Trouble],
    assignment: Mapping[models.PartitionId, models.Ownership],
) -> dict[models.PartitionId, Trouble]:
    """The troubles that still hold after a cycle's plan (``assignment``): a partition that
    moves away from its pod (the pod is gone) leaves its trouble behind, as the new owner
    starts afresh. A partition reported lost is shown in the cycle that gives it out again."""
    kept: dict[models.PartitionId, Trouble] = {}
    for pid, t in troubles.items():
        o = assignment.get(pid)
        if t.state == "lost" or (o is not None and o.owner == t.pod and o.epoch == t.epoch):
            kept[pid] = t
    return kept


def previous_entries(status: Mapping[str, Any]) -> dict[tuple[str, str, int, str], Any]:
    """The entries of the previous ``status.failing`` by key; malformed ones are skipped (the
    status is the operator's own, but a user may edit it by hand)."""
    raw = status.get(STATUS_FIELD)
    entries: dict[tuple[str, str, int, str], Any] = {}
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping):
            continue
        pid, pod, epoch, state = (item.get(k) for k in ("partition", "pod", "epoch", "state"))
        if not (bounds.is_partition_id(pid) and isinstance(pod, str) and bounds.is_epoch(epoch)):
            continue
        if state not in partitionreports.REPORT_STATES:
            continue
        assert isinstance(pid, str)
        assert isinstance(epoch, int)
        assert isinstance(state, str)
        entries[(pid, pod, epoch, state)] = item
    return entries


def status_entries(
    troubles: Mapping[models.PartitionId, Trouble],
    *,
    previous: Mapping[str, Any],
    now: datetime.datetime,
) -> list[FailingEntryBody]:
    """``status.failing``: every troubled partition in order, ``since`` kept from the previous
    status while the trouble is the same (same pod, epoch and state)."""
    before = previous_entries(previous)
    entries: list[FailingEntryBody] = []
    for index, t in enumerate(troubles.values()):
        old = before.get(t.key)
        since = old.get("since") if old is not None else None
        if not (isinstance(since, str) and timestamps.parse_time(since) is not None):
            since = timestamps.format_time(now)
        entry: FailingEntryBody = {
            "partition": t.partition,
            "pod": t.pod,
            "epoch": t.epoch,
            "state": t.state,
            "attempts": t.attempts,
            "error": t.error if index < MAX_ERRORS_LISTED else "",
            "since": since,
        }
        entries.append({**entry, "restarting": True} if t.restarting else entry)
    return entries


def describe(t: Trouble) -> str:
    """One trouble in a sentence's part: where it is, what state, and the error's first line."""
    attempts = f" after {conditions.amount(t.attempts, 'attempt')}" if t.attempts else ""
    error = f": {t.error}" if t.error else ""
    return f"{t.partition} on {t.pod} {t.state}{attempts}{error}"


def _named(names: list[str], limit: int, noun: str = "") -> str:
    """The first ``limit`` of ``names``, and how many more (``noun``: of what, singular)."""
    text = ", ".join(names[:limit])
    more = len(names) - limit
    if more <= 0:
        return text
    return text + f" and {conditions.amount(more, f'more {noun}') if noun else f'{more} more'}"


def _attempts(group: list[Trouble]) -> str:
    """How many attempts the troubles of ``group`` took: ``after 3 attempts``, ``after up to
    3 attempts`` when they differ, nothing when none counts one."""
    most = max(t.attempts for t in group)
    if not most:
        return ""
    same = all(t.attempts == most for t in group)
    return f"after {'' if same else 'up to '}{conditions.amount(most, 'attempt')}"


def _group(group: list[Trouble]) -> str:
    """Troubles that share a state and an error, in one part of a sentence: the first
    partitions and their count, the pods, the state and the error once."""
    first = group[0]
    if len(group) == 1:
        return describe(first)
    pods = sorted({t.pod for t in group}, key=models.name_key)
    attempts = _attempts(group)
    error = f": {first.shape}" if first.error else ""
    where = _named(pods, MAX_PODS_NAMED, "pod")
    partitions = partitionlists.named([t.partition for t in group], MAX_NAMED)
    return f"{partitions} on {where} {first.state}{' ' if attempts else ''}{attempts}{error}"


def _error(group: list[Trouble], *, named: bool) -> str:
    """One error of one pod's troubles in one state, with the partitions it stops when
    ``named``, and its attempts: ``0-5: RuntimeError: boom (after 1 attempt)``; nothing when
    there is nothing to say."""
    attempts = _attempts(group)
    first = group[0]
    words = [first.shape if len(group) > 1 else first.error, f"({attempts})" if attempts else ""]
    if named:
        words[0] = words[0] or "no error given"
        words.insert(0, partitionlists.named([t.partition for t in group], MAX_NAMED) + ":")
    return " ".join(w for w in words if w)


def _groups(troubles: Iterable[Trouble]) -> list[list[Trouble]]:
    """Troubles that share a state and an error (`Trouble.shape`), in the order they come."""
    groups: dict[tuple[str, str], list[Trouble]] = {}
    for t in troubles:
        groups.setdefault((t.state, t.shape), []).append(t)
    return list(groups.values())


def by_error(troubles: Sequence[Trouble]) -> str:
    """The errors of troubles that share a pod and a state (one Event's, which names them
    both), each said once with its attempts: ``RuntimeError: boom (after 3 attempts)``. The
    partitions an error stops are named only when there is more than one error. The first
    `MAX_NAMED` errors; an Event's message is bounded besides."""
    groups = _groups(troubles)
    return "; ".join(_error(group, named=len(groups) > 1) for group in groups[:MAX_NAMED])


def message(troubles: Mapping[models.PartitionId, Trouble]) -> str:
    """PartitionsFailing's message: how many partitions, per state, then the troubles grouped
    by state and error (a missing consumer group fails every partition the same way: one
    group, its first partitions named and the rest counted), as many groups as fit in
    `MAX_MESSAGE` (`conditions.shorten`)."""
    by_state = counts(troubles)
    summary = ", ".join(f"{n} {state}" for state, n in by_state.items() if n)
    plural = "s" if len(troubles) > 1 else ""
    head = f"{len(troubles)} partition{plural} in trouble ({summary}): "
    parts: list[str] = []
    shown = 0
    for group in _groups(troubles.values()):
        part = _group(group)
        left = len(troubles) - shown - len(group)
        tail = f"; and {conditions.amount(left, 'more partition')}" if left > 0 else ""
        if parts and len(head) + len("; ".join([*parts, part])) + len(tail) > MAX_MESSAGE:
            break
        parts.append(part)
        shown += len(group)
    left = len(troubles) - shown
    tail = f"; and {conditions.amount(left, 'more partition')}" if left > 0 else ""
    body = conditions.shorten("; ".join(parts), MAX_MESSAGE - len(head) - len(tail))
    return head + body + tail


def condition(troubles: Mapping[models.PartitionId, Trouble]) -> conditions.Condition:
    """PartitionsFailing: True while any assigned partition is reported in trouble."""
    if not troubles:
        return conditions.Condition(
            type=conditions.PARTITIONS_FAILING,
            status="False",
            reason="AllPartitionsProcessing",
            message="no pod reports a failing, parked, stuck or lost partition",
        )
    return conditions.Condition(
        type=conditions.PARTITIONS_FAILING,
        status="True",
        reason=_reason(counts(troubles)),
        message=message(troubles),
    )


def _reason(counts: Mapping[str, int]) -> str:
    """The most pressing state names the condition's reason: parked partitions stand still
    until someone acts, lost ones are being reassigned, failing ones may still recover."""
    for state, reason in (
        ("parked", "PartitionsParked"),
        ("stuck", "PartitionsStuck"),
        ("failing", "PartitionsFailing"),
        ("lost", "PartitionsLost"),
    ):
        if counts.get(state):
            return reason
    return "PartitionsFailing"


def counts(troubles: Mapping[models.PartitionId, Trouble]) -> dict[str, int]:
    """Troubled partitions per state, every state present (0 when none): for the metric."""
    result: dict[str, int] = dict.fromkeys(partitionreports.REPORT_STATES, 0)
    for t in troubles.values():
        result[t.state] += 1
    return result


@dataclasses.dataclass(frozen=True, kw_only=True)
class Changes:
    """What changed since the previous status: troubles that are new (or changed state, pod
    or epoch), and partitions whose trouble is over. A partition that joins a trouble its pod
    already had (one state, one error) is no news: a checkpoint container deleted reached a
    pod's partitions over three cycles and posted three Events of the same error, where the
    status and the condition name them all."""

    started: tuple[Trouble, ...]
    #: (partition, pod, epoch, state) of each trouble that is no longer reported
    ended: tuple[tuple[str, str, int, str], ...]


def changes(
    troubles: Mapping[models.PartitionId, Trouble], *, previous: Mapping[str, Any]
) -> Changes:
    """The news of this cycle, for Events: nothing while the troubles stay the same."""
    before = previous_entries(previous)
    said = {(t.pod, t.state, t.shape) for t in troubles.values() if t.key in before}
    started = tuple(
        t
        for t in troubles.values()
        if t.key not in before and (t.pod, t.state, t.shape) not in said
    )
    ended = tuple(
        key
        for key in sorted(before, key=lambda k: models.name_key(k[0]))
        if models.PartitionId(key[0]) not in troubles
    )
    return Changes(started=started, ended=ended)
