"""The batches pods set aside into the dead letters, as the operator tells them, pure.

Under ``onFailure: deadLetter`` a pod that gives up on a batch writes it to the dead letters
and goes on: its partition's trouble ends just as when a retry goes through. So the pod also
counts the batches it set aside at each epoch it holds, with the last one's name and error,
beside its reports (`contracts.partitionreports.SetAside`). The operator keeps what it was told
in ``status.deadLettered``: one entry per partition, for as long as the pod that told it holds
the partition at that epoch. It posts a Warning ``BatchDeadLettered`` (`account`) when a count
rises or the last name changes (a pod whose process restarted counts from 1 again, and its
new dead letter has a new name), at most one a pod per `HOLD_SECONDS`, and ``status`` keeps
what each Warning told. ``PartitionRecovered`` says which of the two ended a failing
partition's trouble (`troubleevents`), and a partition that sets batch after batch aside
for one cause fails and recovers without an Event a batch (`Account.streaming`).

What a pod tells is its word: only about the partitions it was given, at the epoch given
(`partitionreports.set_asides`), bounded, and said as the pod's (``c-0 set a batch ...``).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import (
    bounds,
    conditions,
    failurepolicy,
    partitionreports,
    timestamps,
)
from eventhub_balancer.reconciling import kubeevents, observations

#: The status field that lists what the pods set aside at the epochs they hold.
STATUS_FIELD = "deadLettered"
#: Entries that keep their error text (the Event said it; the dead letter holds it whole);
#: the others keep its `cause`, which a stream of them shares (`Account.streaming`).
MAX_ERRORS_LISTED = 32
#: The Warning posted per pod when it set batches aside.
REASON = "BatchDeadLettered"
#: Partitions named, each with its last dead letter, in one pod's Event.
MAX_NAMED = 8
#: The least time between two Warnings of one pod: a stream of poison events sets a batch
#: aside every few seconds on each partition, and each one told at once was an Event a
#: second. The batches set aside meanwhile are told together in the next.
HOLD_SECONDS = 60.0
#: How long after a pod's last Warning its partitions are taken to set batch after batch
#: aside (`Account.streaming`): two holds, so that the one Warning due a minute keeps it.
STREAM_SECONDS = 2 * HOLD_SECONDS

Key = tuple[str, str, int]


class SetAsideEntryBody(TypedDict, total=False):
    """One entry of ``status.deadLettered``."""

    partition: str
    pod: str
    epoch: int
    batches: int
    told: int
    toldAt: str
    name: str
    error: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Told:
    """What a pod set aside of one partition at the epoch it holds it."""

    partition: models.PartitionId
    pod: str
    epoch: int
    batches: int
    name: str = ""
    error: str = ""

    @property
    def key(self) -> Key:
        return (self.partition, self.pod, self.epoch)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reading:
    """What the pods told, by partition, and which pods tell it at all."""

    told: Mapping[models.PartitionId, Told] = dataclasses.field(default_factory=dict)
    #: pods whose reports say what they set aside (a pod from before that says nothing, and
    #: its partition's recovery cannot say which way it went)
    telling: frozenset[str] = frozenset()


def read(
    *,
    maps: Mapping[str, observations.StoredMap],
    assignment: Mapping[models.PartitionId, models.Ownership],
) -> Reading:
    """What each pod (``maps``: its current ConfigMap by name) set aside of the partitions
    ``assignment`` gives it, at the epoch it gives them."""
    given = models.epochs_given(assignment)
    told: dict[models.PartitionId, Told] = {}
    telling: set[str] = set()
    for pod in sorted(given, key=models.name_key):
        cm = maps.get(pod)
        found = (
            None if cm is None else partitionreports.set_asides(cm.annotations, current=given[pod])
        )
        if found is None:
            continue
        telling.add(pod)
        for partition, aside in found.items():
            pid = models.PartitionId(partition)
            told[pid] = Told(
                partition=pid,
                pod=pod,
                epoch=aside.epoch,
                batches=aside.batches,
                name=aside.name,
                error=aside.error,
            )
    ordered = {pid: told[pid] for pid in sorted(told, key=models.name_key)}
    return Reading(told=ordered, telling=frozenset(telling))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Before:
    """An entry of the previous ``status.deadLettered``: what was seen, and what was told."""

    batches: int
    name: str = ""
    #: the count an Event told, and when (None: never), as written and in seconds
    told: int = 0
    told_at: str | None = None
    told_seconds: float | None = None
    error: str = ""


def previous_entries(status: Mapping[str, Any]) -> dict[Key, Before]:
    """The previous ``status.deadLettered`` by (partition, pod, epoch); malformed entries are
    skipped (a user may edit the status by hand)."""
    raw = status.get(STATUS_FIELD)
    entries: dict[Key, Before] = {}
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping):
            continue
        pid, pod, epoch = item.get("partition"), item.get("pod"), item.get("epoch")
        batches, name, told = item.get("batches"), item.get("name", ""), item.get("told", 0)
        if not (bounds.is_partition_id(pid) and isinstance(pod, str) and bounds.is_epoch(epoch)):
            continue
        if isinstance(pid, str) and isinstance(epoch, int) and bounds.is_epoch(batches):
            assert isinstance(batches, int)
            at = item.get("toldAt")
            moment = timestamps.parse_time(at) if isinstance(at, str) else None
            entries[(pid, pod, epoch)] = Before(
                batches=batches,
                name=name if isinstance(name, str) else "",
                told=told if isinstance(told, int) and bounds.is_epoch(told) else 0,
                told_at=at if moment is not None else None,
                told_seconds=moment.timestamp() if moment is not None else None,
                error=str(item.get("error") or ""),
            )
    return entries


@dataclasses.dataclass(frozen=True, kw_only=True)
class Account:
    """What a cycle makes of the batches set aside: the Events, the status, what is new."""

    events: list[kubeevents.KubeEvent]
    entries: list[SetAsideEntryBody]
    #: (partition, pod) of each batch set aside since the previous status
    fresh: frozenset[tuple[str, str]]
    #: the partitions (partition, pod, epoch) setting batch after batch aside, with the cause
    #: of their last one (`cause`): their failing starts and ends are these Warnings' to tell
    streaming: Mapping[Key, str] = dataclasses.field(default_factory=dict)


def account(
    reading: Reading,
    *,
    previous: Mapping[str, Any],
    now: datetime.datetime,
    consumer: str,
    namespace: str,
    processing: failurepolicy.Processing | None = None,
) -> Account:
    """What was set aside since ``previous`` (the status before this cycle): a count that rose,
    or a last name that changed (a pod that restarted counts from 1 again). A pod's batches not
    told yet are told in one Warning, at most one per pod per `HOLD_SECONDS`: a stream of
    poison events is a Warning a minute, each with the batches since the last."""
    before = previous_entries(previous)
    wall = now.timestamp()
    fresh: set[tuple[str, str]] = set()
    untold: dict[str, list[tuple[Told, int]]] = {}
    seen = [(t, before.get(t.key, Before(batches=0))) for t in reading.told.values()]
    for t, b in seen:
        if t.batches > b.batches or (t.name and b.name and t.name != b.name):
            fresh.add((t.partition, t.pod))
        told = b.told if t.batches >= b.told else 0  # a count begun again: told none of it
        if t.batches > told:
            untold.setdefault(t.pod, []).append((t, t.batches - told))
    last: dict[str, float] = {}  # each pod's last Warning
    for (_, pod, _), b in before.items():
        if b.told_seconds is not None:
            last[pod] = max(last.get(pod, b.told_seconds), b.told_seconds)
    due = {pod: group for pod, group in untold.items() if wall - last.get(pod, 0) >= HOLD_SECONDS}
    entries: list[SetAsideEntryBody] = []
    for index, (t, b) in enumerate(seen):
        told, at = b.told, b.told_at
        if t.pod in due:
            told, at = t.batches, timestamps.format_time(now)
        entry: SetAsideEntryBody = {
            "partition": t.partition,
            "pod": t.pod,
            "epoch": t.epoch,
            "batches": t.batches,
            "told": min(told, t.batches),
            "name": t.name,
            "error": t.error if index < MAX_ERRORS_LISTED else cause(t.error),
        }
        if at is not None:
            entry["toldAt"] = at
        entries.append(entry)
    events = [
        _event(pod, group, consumer=consumer, namespace=namespace, processing=processing)
        for pod, group in due.items()
    ]
    streaming = {
        key: cause(b.error)
        for key, b in before.items()
        if b.error and wall - last.get(key[1], 0) < STREAM_SECONDS
    }
    return Account(events=events, entries=entries, fresh=frozenset(fresh), streaming=streaming)


def cause(error: str) -> str:
    """What an error says failed, before its first colon (``NotAnOrder``, ``KeyError``): the
    batches of one poison stream each name their own sequence numbers after it."""
    return error.split(":", 1)[0].strip()


def _event(
    pod: str,
    group: Sequence[tuple[Told, int]],
    *,
    consumer: str,
    namespace: str,
    processing: failurepolicy.Processing | None,
) -> kubeevents.KubeEvent:
    """One pod's Warning: its partitions, each with the batches not told before, its last dead
    letter (the command that shows it) and error."""
    after = f" after spec.processing.maxAttempts ({processing.max_attempts})" if processing else ""
    new = sum(n for _, n in group)
    plural = "s" if len(group) > 1 else ""
    named = kubeevents.join([t.partition for t, _ in group])
    parts = [_told(t, n, named=len(group) > 1) for t, n in group[:MAX_NAMED]]
    more = f"; and {len(group) - MAX_NAMED} more" if len(group) > MAX_NAMED else ""
    show = next((t.name for t, _ in group if t.name), "NAME")
    batches = "a batch" if new == 1 else f"{new} batches"
    message = (
        f"{pod} set {batches} of partition{plural} {named} aside into the dead letters{after}"
        f" and goes on after it (ehb deadletters show {consumer} {show} -n {namespace}): "
        f"{'; '.join(parts)}{more}"
    )
    return kubeevents.KubeEvent(
        reason=REASON, message=conditions.shorten(message, kubeevents.MAX_MESSAGE), type="Warning"
    )


def _told(t: Told, new: int, *, named: bool) -> str:
    """``ValueError: no (2 at epoch 4)``: a partition's last error and its count (``3 since
    the last Warning, 5 at epoch 4`` when some were told before); when one Event tells
    several partitions, after the partition and its last dead letter (``3: 3/110-114, ...``):
    the command names the first only."""
    said = [f"{t.partition}: {t.name or 'its name not told'}"] if named else []
    said += [t.error or "no error told"]
    since = f"{new} since the last Warning, " if new != t.batches else ""
    return f"{', '.join(said)} ({since}{t.batches} at epoch {t.epoch})"
