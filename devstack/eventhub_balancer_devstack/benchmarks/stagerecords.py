"""The records a benchmark times its stages from (`stages`), read as the parts keep them.

- the API server's commit of every Pod and ConfigMap write (the local API server's write
  record, `kube.histories.WriteRecord`), as `PodCommit` and `MapCommit`: what each write
  changed of a pod's membership or of an assignment and its acknowledgement (`commits`);
- the operator's cycle line (`handlers.cycles.CYCLE_TIMES`, at DEBUG), as `Cycle`: kept by
  `CycleRecords` in the operator's process (`cycle_of`);
- a consumer pod's log lines, as `PodEvent`: a partition's final checkpoint, its receive
  link open, its first events (`pod_events`, `read_pod_logs`).

Times are wall-clock seconds since the epoch throughout: all the parts run on one machine.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from eventhub_balancer.adapters import receiving
from eventhub_balancer.consumer import partitions
from eventhub_balancer.contracts import configmaps, podassignments
from eventhub_balancer.handlers import cycles


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
    parsed = podassignments.parse_data(data)
    before = podassignments.parse_data((previous or {}).get("data") or {})
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
