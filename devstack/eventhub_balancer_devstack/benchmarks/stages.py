"""Where a rebalance's time goes: the stages of a step, timed from the components' own records.

A step of a benchmark (a pod joins, leaves, dies) is balanced once a chain of hand-offs has
run: the operator wakes, decides, writes ConfigMaps; each pod applies its ConfigMap,
releases what it lost (final checkpoint, acknowledgement) and takes up what it gained
(receive link, first events); the operator sees each acknowledgement and writes again. This
module lines up the records each part keeps of its own work (read by `stagerecords`), and
times every link of the chain. Nothing is guessed or hooked for the benchmark alone:

- the API server's commit time of every Pod and ConfigMap write (the local API server's write
  record, `kube.histories.WriteRecord`): pod changes, the operator's ConfigMap writes, the pods'
  acknowledgements (``applied-generation``, ``released``);
- the operator's cycle line (`handlers.cycles.CYCLE_TIMES`, at DEBUG): when a cycle woke,
  how long it decided and wrote;
- a consumer pod's log lines (`consumer.partitions` and `adapters.receiving`): a partition's
  final checkpoint, its receive link open, its first events.

A stage whose records a run does not have (the operator benchmark's consumer doubles keep no
checkpoints and open no links) is absent from its figures, never zero. Times are wall-clock
seconds since the epoch throughout; all the parts run on one machine, so on one clock.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import TypedDict

from eventhub_balancer.balancing import models
from eventhub_balancer_devstack.benchmarks import stagerecords

#: The stages, in the order of the chain, with their names in tables.
STAGES: tuple[tuple[str, str], ...] = (
    ("pod_change_to_wake", "pod change -> operator wake"),
    ("wake_to_decision", "wake -> decision"),
    ("decision_to_written", "decision -> ConfigMap written"),
    ("written_to_applied", "written -> pod applied"),
    ("revocation_to_final_checkpoint", "revocation -> final checkpoint"),
    ("final_checkpoint_to_acknowledgement", "final checkpoint -> acknowledgement"),
    ("revocation_to_acknowledgement", "revocation -> acknowledgement"),
    ("acknowledgement_to_seen", "acknowledgement -> operator sees it"),
    ("assignment_to_receiver_open", "assignment -> receiver open"),
    ("receiver_handshake", "of which the link's own opening"),
    ("receiver_open_to_first_event", "receiver open -> first event"),
)
STAGE_NAMES = dict(STAGES)

#: A commit this close after a cycle's write phase ended still belongs to it: the log line
#: is written after the answer arrived, the commit happens before it is sent.
SLACK_S = 0.002


class StageFigures(TypedDict):
    median_ms: float
    max_ms: float
    count: int


#: Stage id -> its figures; only the stages measured.
Stages = dict[str, StageFigures]


# -- timing the stages -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scope:
    """Whose records count: one EventHubConsumer and the pods its selector matches."""

    namespace: str
    consumer: str
    labels: Mapping[str, str]

    def pod(self, commit: stagerecords.PodCommit) -> bool:
        return commit.namespace == self.namespace and all(
            commit.labels.get(k) == v for k, v in self.labels.items()
        )

    def map(self, commit: stagerecords.MapCommit) -> bool:
        return commit.namespace == self.namespace and commit.consumer == self.consumer

    def cycle(self, cycle: stagerecords.Cycle) -> bool:
        return cycle.namespace == self.namespace and cycle.consumer == self.consumer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Records:
    """A run's records (any order); `durations` picks a step's out of them."""

    pods: Sequence[stagerecords.PodCommit]
    maps: Sequence[stagerecords.MapCommit]
    cycles: Sequence[stagerecords.Cycle]
    pod_events: Sequence[stagerecords.PodEvent] = ()


def _first_after(times: Sequence[float], at: float) -> float | None:
    return min((t for t in times if t >= at), default=None)


def durations(
    records: Records, scope: Scope, *, start: float, end: float
) -> dict[str, list[float]]:
    """Each stage's durations, in seconds, for the changes of the step [start, end]: the pod
    changes and operator ConfigMap writes within it, followed wherever they lead."""
    found: dict[str, list[float]] = {key: [] for key, _ in STAGES}
    cycles_ = sorted((c for c in records.cycles if scope.cycle(c)), key=lambda c: c.woke)
    wakes = [c.woke for c in cycles_]
    maps = sorted((m for m in records.maps if scope.map(m)), key=lambda m: m.at)
    events: dict[tuple[str, str, int, str], list[float]] = {}
    handshakes: dict[tuple[str, str, int, float], float] = {}
    for e in records.pod_events:
        events.setdefault((e.pod, e.partition, e.epoch, e.kind), []).append(e.at)
        if e.kind == "link_open":
            handshakes[(e.pod, e.partition, e.epoch, e.at)] = e.took

    for change in records.pods:
        if scope.pod(change) and start <= change.at <= end:
            wake = _first_after(wakes, change.at)
            if wake is not None:
                found["pod_change_to_wake"].append(wake - change.at)

    written = [m for m in maps if m.data_changed and start <= m.at <= end]
    # A pod that has not applied anything yet is still starting: its first ConfigMap waits
    # for the process (the benchmarks' "pods up"), not for the balancer.
    following = [m for m in written if m.applied is not None]
    for cycle in cycles_:
        mine = [m for m in written if cycle.decided <= m.at <= cycle.written + SLACK_S]
        if not mine:
            continue
        found["wake_to_decision"].append(cycle.decided - cycle.woke)
        found["decision_to_written"] += [m.at - cycle.decided for m in mine]

    for write in written:
        later = [m for m in maps if m.uid == write.uid and m.at >= write.at]
        applied = next(
            (m for m in later if m.applied_changed and m.applied == write.generation), None
        )
        if applied is not None and write in following:
            found["written_to_applied"].append(applied.at - write.at)
        for partition, epoch in write.revoked.items():
            ack = next((m for m in later if m.released_added.get(partition, -1) >= epoch), None)
            final = _first_after(
                events.get((write.pod, partition, epoch, "final_checkpoint"), []), write.at
            )
            if final is not None:
                found["revocation_to_final_checkpoint"].append(final - write.at)
            if ack is not None:
                found["revocation_to_acknowledgement"].append(ack.at - write.at)
        for partition, epoch in write.assigned.items():
            opened = _first_after(
                events.get((write.pod, partition, epoch, "link_open"), []), write.at
            )
            if opened is None:
                continue
            found["assignment_to_receiver_open"].append(opened - write.at)
            found["receiver_handshake"].append(
                handshakes.get((write.pod, partition, epoch, opened), 0.0)
            )
            first = _first_after(
                events.get((write.pod, partition, epoch, "first_events"), []), opened
            )
            if first is not None:
                found["receiver_open_to_first_event"].append(first - opened)
    # Every release the step's pods acknowledged: on revocation, and on their own at shutdown
    # (a deleted or scaled-in pod releases everything when it gets SIGTERM).
    for ack in maps:
        if not ack.released_added or not start <= ack.at <= end:
            continue
        for partition, epoch in ack.released_added.items():
            finals = events.get((ack.pod, partition, epoch, "final_checkpoint"), [])
            final = max((t for t in finals if t <= ack.at), default=None)
            if final is not None:
                found["final_checkpoint_to_acknowledgement"].append(ack.at - final)
        seen = _first_after(wakes, ack.at)
        if seen is not None:
            found["acknowledgement_to_seen"].append(seen - ack.at)
    return {key: values for key, values in found.items() if values}


class OwnerChanges(TypedDict):
    """The partitions given out in a step, from the operator's committed ConfigMap writes."""

    #: Partitions given to a pod at a new epoch (a partition given out twice counts twice).
    count: int
    #: The partitions given out more than once in the step: moved twice.
    moved_twice: list[str]


def owner_changes(records: Records, scope: Scope, *, start: float, end: float) -> OwnerChanges:
    """How many times the step [start, end] gave a partition to a pod at a new epoch, and
    which partitions it gave out more than once (a plan made in stages moves some twice)."""
    epochs: dict[str, set[int]] = {}
    for commit in records.maps:
        if scope.map(commit) and start <= commit.at <= end:
            for partition, epoch in commit.assigned.items():
                epochs.setdefault(partition, set()).add(epoch)
    twice = [p for p, given in epochs.items() if len(given) > 1]
    return {
        "count": sum(len(given) for given in epochs.values()),
        "moved_twice": sorted(twice, key=models.name_key),
    }


def figures(found: Mapping[str, Sequence[float]]) -> Stages:
    """Median and maximum milliseconds of each stage measured (in the chain's order)."""
    result: Stages = {}
    for key, _ in STAGES:
        values = found.get(key) or ()
        if values:
            result[key] = {
                "median_ms": round(statistics.median(values) * 1000, 1),
                "max_ms": round(max(values) * 1000, 1),
                "count": len(values),
            }
    return result


def merge(*found: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """Several steps' durations as one (the rounds of a benchmark)."""
    merged: dict[str, list[float]] = {}
    for one in found:
        for key, values in one.items():
            merged.setdefault(key, []).extend(values)
    return merged


def format_table(steps: Sequence[tuple[str, Stages]]) -> list[str]:
    """The stages of each step, for terminals."""
    lines = [f"{'stage':<38} " + " ".join(f"{name[:18]:>18}" for name, _ in steps)]
    for key, title in STAGES:
        cells = []
        for _, stages in steps:
            s = stages.get(key)
            cells.append("-" if s is None else f"{s['median_ms']:.0f} / {s['max_ms']:.0f} ms")
        if any(c != "-" for c in cells):
            lines.append(f"{title:<38} " + " ".join(f"{c:>18}" for c in cells))
    return lines
