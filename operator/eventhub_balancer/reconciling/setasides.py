"""The batches pods set aside into the dead letters, as the operator tells them, pure.

Under ``onFailure: deadLetter`` a pod that gives up on a batch writes it to the dead letters
and goes on: its partition's trouble ends just as when a retry goes through. So the pod also
counts the batches it set aside at each epoch it holds, with the last one's name and error,
beside its reports (`contracts.partitionreports.SetAside`). The operator keeps what it was told
in ``status.deadLettered``: one entry per partition, for as long as the pod that told it holds
the partition at that epoch. It posts a Warning ``BatchDeadLettered`` (`events`) when a count
rises or the last name changes. A pod whose process restarted counts from 1 again, and its
new dead letter has a new name. And ``PartitionRecovered`` says which of the two ended a
failing partition's trouble (`troubleevents`).

What a pod tells is its word: only about the partitions it was given, at the epoch given
(`partitionreports.set_asides`), bounded, and said as its own (``the pod names it ...``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, conditions, failurepolicy, partitionreports
from eventhub_balancer.reconciling import kubeevents, observations

#: The status field that lists what the pods set aside at the epochs they hold.
STATUS_FIELD = "deadLettered"
#: Entries that keep their error text (the Event said it; the dead letter holds it whole).
MAX_ERRORS_LISTED = 32
#: The Warning posted per pod when it set batches aside.
REASON = "BatchDeadLettered"
#: Partitions named, each with its last dead letter, in one pod's Event.
MAX_NAMED = 8

Key = tuple[str, str, int]


class SetAsideEntryBody(TypedDict, total=False):
    """One entry of ``status.deadLettered``."""

    partition: str
    pod: str
    epoch: int
    batches: int
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
    given: dict[str, dict[str, int]] = {}
    for pid, o in assignment.items():
        if o.owner is not None:
            given.setdefault(o.owner, {})[pid] = o.epoch
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


def previous_entries(status: Mapping[str, Any]) -> dict[Key, tuple[int, str]]:
    """The previous ``status.deadLettered``, (batches, name) by (partition, pod, epoch);
    malformed entries are skipped (a user may edit the status by hand)."""
    raw = status.get(STATUS_FIELD)
    entries: dict[Key, tuple[int, str]] = {}
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping):
            continue
        pid, pod, epoch = item.get("partition"), item.get("pod"), item.get("epoch")
        batches, name = item.get("batches"), item.get("name", "")
        if not (bounds.is_partition_id(pid) and isinstance(pod, str) and bounds.is_epoch(epoch)):
            continue
        if isinstance(pid, str) and isinstance(epoch, int) and isinstance(batches, int):
            entries[(pid, pod, epoch)] = (batches, name if isinstance(name, str) else "")
    return entries


def status_entries(reading: Reading) -> list[SetAsideEntryBody]:
    """``status.deadLettered``: each partition's count at the epoch its pod holds, in order."""
    return [
        {
            "partition": t.partition,
            "pod": t.pod,
            "epoch": t.epoch,
            "batches": t.batches,
            "name": t.name,
            "error": t.error if index < MAX_ERRORS_LISTED else "",
        }
        for index, t in enumerate(reading.told.values())
    ]


def news(reading: Reading, *, previous: Mapping[str, Any]) -> list[Told]:
    """What was set aside since ``previous`` (the status before this cycle): a count that
    rose, or a last name that changed (a pod that restarted counts from 1 again)."""
    before = previous_entries(previous)
    found = []
    for t in reading.told.values():
        batches, name = before.get(t.key, (0, ""))
        if t.batches > batches or (t.name and name and t.name != name):
            found.append(t)
    return found


def events(
    fresh: Sequence[Told],
    *,
    consumer: str,
    namespace: str,
    processing: failurepolicy.Processing | None = None,
) -> list[kubeevents.KubeEvent]:
    """One Warning per pod that set batches aside since the last status: its partitions,
    each with its last dead letter (the command that shows it) and error."""
    by_pod: dict[str, list[Told]] = {}
    for t in fresh:
        by_pod.setdefault(t.pod, []).append(t)
    after = f" after spec.processing.maxAttempts ({processing.max_attempts})" if processing else ""
    found = []
    for pod, group in by_pod.items():
        plural = "s" if len(group) > 1 else ""
        named = kubeevents.join([t.partition for t in group])
        parts = [_told(t, named=len(group) > 1) for t in group[:MAX_NAMED]]
        more = f"; and {len(group) - MAX_NAMED} more" if len(group) > MAX_NAMED else ""
        show = next((t.name for t in group if t.name), "NAME")
        message = (
            f"{pod} set a batch of partition{plural} {named} aside into the dead letters{after}"
            f" and goes on after it (ehb deadletters show {consumer} {show} -n {namespace}): "
            f"{'; '.join(parts)}{more}"
        )
        found.append(
            kubeevents.KubeEvent(
                reason=REASON,
                message=conditions.shorten(message, kubeevents.MAX_MESSAGE),
                type="Warning",
            )
        )
    return found


def _told(t: Told, *, named: bool) -> str:
    """``3/110-114, ValueError: no (2 at epoch 4)``: a partition's last dead letter, its
    error and the count, after the partition (``3: ...``) when one Event tells several."""
    said = ", ".join(w for w in (t.name or "its name not told", t.error) if w)
    return f"{f'{t.partition}: ' if named else ''}{said} ({t.batches} at epoch {t.epoch})"
