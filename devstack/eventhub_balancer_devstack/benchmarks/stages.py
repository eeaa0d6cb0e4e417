"""Where a rebalance's time goes: the stages of a step, timed from the components' own records.

A step of a benchmark (a pod joins, leaves, dies) is balanced once a chain of hand-offs has
run: the operator wakes, decides, writes ConfigMaps; each pod applies its ConfigMap,
releases what it lost (final checkpoint, acknowledgement) and takes up what it gained
(receive link, first events); the operator sees each acknowledgement and writes again. This
module lines up the records each part keeps of its own work, and times every link of the
chain. Nothing is guessed or hooked for the benchmark alone:

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

import collections
import dataclasses
import datetime
import logging
import re
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from eventhub_balancer.adapters import receiving
from eventhub_balancer.balancing import models
from eventhub_balancer.consumer import partitions
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers import cycles

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodCommit:
    """A committed Pod write that changes what the operator makes of the pod."""

    at: float
    namespace: str
    pod: str
    labels: Mapping[str, str]
    change: Literal["ready", "not-ready", "deleting", "deleted"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapCommit:
    """A committed assignment ConfigMap write, as the stages need it."""

    at: float
    namespace: str
    name: str
    uid: str
    consumer: str
    pod: str
    deleted: bool
    #: The data's generation, and whether this write changed it (an operator write).
    generation: int | None
    data_changed: bool
    #: partition -> (epoch, state) after the write, and the partitions that became revoking /
    #: owned at a new epoch by it.
    partitions: Mapping[str, tuple[int, str]]
    revoked: Mapping[str, int]
    assigned: Mapping[str, int]
    #: The pod's annotations after the write, and what this write added to them.
    applied: int | None
    applied_changed: bool
    released_added: Mapping[str, int]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cycle:
    """One operator cycle, from its log line."""

    namespace: str
    consumer: str
    woke: float
    decided: float
    written: float
    writes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodEvent:
    """A consumer pod's record of one partition: its link open, first events, final
    checkpoint."""

    at: float
    pod: str
    partition: str
    epoch: int
    kind: Literal["link_open", "first_events", "final_checkpoint"]
    #: The delay the line states (the link's opening, for ``link_open``), in seconds.
    took: float = 0.0


# -- reading the records -----------------------------------------------------------------------


def _ready(body: Mapping[str, Any] | None) -> bool:
    if not body:
        return False
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _deleting(body: Mapping[str, Any] | None) -> bool:
    return bool(body and (body.get("metadata") or {}).get("deletionTimestamp"))


def pod_commit(
    event_type: str, body: Mapping[str, Any], previous: Mapping[str, Any] | None, at: float
) -> PodCommit | None:
    """The membership change a Pod write made, or None when it made none."""
    metadata = body.get("metadata") or {}
    change: Literal["ready", "not-ready", "deleting", "deleted"] | None = None
    if event_type == "DELETED":
        change = "deleted"
    elif _deleting(body) and not _deleting(previous):
        change = "deleting"
    elif _ready(body) and not _ready(previous):
        change = "ready"
    elif _ready(previous) and not _ready(body):
        change = "not-ready"
    if change is None:
        return None
    return PodCommit(
        at=at,
        namespace=str(metadata.get("namespace") or ""),
        pod=str(metadata.get("name") or ""),
        labels=dict(metadata.get("labels") or {}),
        change=change,
    )


def map_commit(
    event_type: str, body: Mapping[str, Any], previous: Mapping[str, Any] | None, at: float
) -> MapCommit | None:
    """An assignment ConfigMap write, compared with what it replaced; None for other maps."""
    data = body.get("data")
    if not isinstance(data, Mapping) or configmaps.KEY_PARTITIONS not in data:
        return None
    metadata = body.get("metadata") or {}
    parsed = configmaps.parse_data(data)
    before = configmaps.parse_data((previous or {}).get("data") or {})
    now = {str(p): (e.epoch, e.state) for p, e in parsed.partitions.items()}
    was = {str(p): (e.epoch, e.state) for p, e in before.partitions.items()} if previous else {}
    annotations = metadata.get("annotations") or {}
    old_annotations = ((previous or {}).get("metadata") or {}).get("annotations") or {}
    applied = configmaps.parse_applied_generation(annotations)
    released = {str(p): e for p, e in configmaps.parse_released(annotations).items()}
    released_before = {str(p): e for p, e in configmaps.parse_released(old_annotations).items()}
    deleted = event_type == "DELETED"
    return MapCommit(
        at=at,
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        consumer=parsed.consumer,
        pod=parsed.pod,
        deleted=deleted,
        generation=parsed.generation,
        data_changed=not deleted and (previous is None or parsed.generation != before.generation),
        partitions=now,
        revoked={
            p: epoch
            for p, (epoch, state) in now.items()
            if not deleted and state == "revoking" and was.get(p) != (epoch, state)
        },
        assigned={
            p: epoch
            for p, (epoch, state) in now.items()
            if not deleted and state == "owned" and was.get(p) != (epoch, state)
        },
        applied=applied,
        applied_changed=(
            not deleted
            and applied is not None
            and applied != configmaps.parse_applied_generation(old_annotations)
        ),
        released_added={
            p: e for p, e in released.items() if not deleted and released_before.get(p) != e
        },
    )


def commits(
    events: Iterable[tuple[str, Mapping[str, Any], Mapping[str, Any] | None, float]],
) -> tuple[list[PodCommit], list[MapCommit]]:
    """The Pod and ConfigMap commits among (type, body, previous, committed_at) writes."""
    pods: list[PodCommit] = []
    maps: list[MapCommit] = []
    for event_type, body, previous, at in events:
        kind = body.get("kind")
        if kind == "Pod":
            found = pod_commit(event_type, body, previous, at)
            if found is not None:
                pods.append(found)
        elif kind == "ConfigMap":
            mapped = map_commit(event_type, body, previous, at)
            if mapped is not None:
                maps.append(mapped)
    return pods, maps


def _wall(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


def cycle_of(record: logging.LogRecord) -> Cycle | None:
    """The operator's cycle line (`cycles.CYCLE_TIMES`) as a `Cycle`; None for other lines."""
    if record.msg != cycles.CYCLE_TIMES or not isinstance(record.args, tuple):
        return None
    namespace, consumer, woke, decide_ms, writes, write_ms = record.args
    start = _wall(str(woke))
    decided = start + float(decide_ms) / 1000  # type: ignore[arg-type]
    return Cycle(
        namespace=str(namespace),
        consumer=str(consumer),
        woke=start,
        decided=decided,
        written=decided + float(write_ms) / 1000,  # type: ignore[arg-type]
        writes=int(writes),  # type: ignore[call-overload]
    )


#: The cycle lines kept between two askings (`CycleRecords.take`): a benchmark asks after each
#: step; one that never asks keeps the newest.
CYCLES_KEPT = 100_000


class CycleRecords(logging.Handler):
    """Keeps the operator's cycle lines of this process (the operator runs in a thread or a
    child process of the benchmark); other records go on to the root logger's handlers as
    usual, the cycle lines only at the level the root logger is set to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.cycles: collections.deque[Cycle] = collections.deque(maxlen=CYCLES_KEPT)
        self._logger = logging.getLogger(cycles.__name__)
        self._saved = (self._logger.level, self._logger.propagate)

    def emit(self, record: logging.LogRecord) -> None:
        cycle = cycle_of(record)
        if cycle is not None:
            self.cycles.append(cycle)
        root = logging.getLogger()
        if record.levelno >= root.getEffectiveLevel():
            root.handle(record)

    def take(self) -> list[Cycle]:
        taken = list(self.cycles)
        self.cycles.clear()
        return taken

    def __enter__(self) -> CycleRecords:
        self._logger.addHandler(self)
        self._logger.setLevel(logging.DEBUG)
        self._logger.propagate = False
        return self

    def __exit__(self, *_: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._saved[0])
        self._logger.propagate = self._saved[1]


def _pattern(message: str) -> re.Pattern[str]:
    """A regular expression for lines of a %-style message, one group per argument."""
    parts = re.split(r"%(?:\.\d+)?[sdf]", message)
    return re.compile(r"(\S+)".join(re.escape(p) for p in parts) + "$")


#: The consumer's text log lines start with logging's asctime (`cli.logformats.TEXT_FORMAT`).
_ASCTIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_POD_LINES: tuple[tuple[Literal["link_open", "first_events", "final_checkpoint"], Any], ...] = (
    ("link_open", _pattern(receiving.LINK_OPEN)),
    ("first_events", _pattern(partitions.FIRST_EVENTS)),
    ("final_checkpoint", _pattern(partitions.FINAL_CHECKPOINT)),
)


def pod_events(pod: str, lines: Iterable[str]) -> Iterator[PodEvent]:
    """A consumer pod's records in its text log (``ehb -v consume``)."""
    for line in lines:
        stamp = _ASCTIME.match(line)
        if stamp is None:
            continue
        for kind, pattern in _POD_LINES:
            found = pattern.search(line.rstrip("\n"))
            if found is None:
                continue
            partition, epoch = found.group(1), found.group(2)
            if not epoch.isdigit():
                break  # a link without an owner level: not a balanced partition's
            at = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            took = float(found.group(found.lastindex or 1)) / 1000
            yield PodEvent(
                at=at, pod=pod, partition=partition, epoch=int(epoch), kind=kind, took=took
            )
            break


def read_pod_logs(directory: Path) -> list[PodEvent]:
    """Every pod's records from ``directory/POD.log`` (the local kubelet's log files)."""
    found: list[PodEvent] = []
    for path in sorted(directory.glob("*.log")):
        with path.open(errors="replace") as f:
            found += pod_events(path.stem, f)
    return found


# -- timing the stages -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scope:
    """Whose records count: one EventHubConsumer and the pods its selector matches."""

    namespace: str
    consumer: str
    labels: Mapping[str, str]

    def pod(self, commit: PodCommit) -> bool:
        return commit.namespace == self.namespace and all(
            commit.labels.get(k) == v for k, v in self.labels.items()
        )

    def map(self, commit: MapCommit) -> bool:
        return commit.namespace == self.namespace and commit.consumer == self.consumer

    def cycle(self, cycle: Cycle) -> bool:
        return cycle.namespace == self.namespace and cycle.consumer == self.consumer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Records:
    """A run's records (any order); `durations` picks a step's out of them."""

    pods: Sequence[PodCommit]
    maps: Sequence[MapCommit]
    cycles: Sequence[Cycle]
    pod_events: Sequence[PodEvent] = ()


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
