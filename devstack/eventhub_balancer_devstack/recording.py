"""What every consumer in the demo, the benchmark and the chaos run processed, and when.

Counting lost and duplicated events needs a record that survives the process: a SIGKILL
must not erase what the handler finished before it. So each pod appends one line per
batch to its own file (``<dir>/<pod>.rec``) with one ``write`` (complete in the kernel
once the call returns, whatever happens to the process next):

    <unix time> <pod> <partition> <epoch> <first>-<last>[,<first>-<last>...]

``process`` is the handler ``ehb consume`` runs (``--handler
eventhub_balancer_devstack.recording:process``); the SDK workers of the side-by-side benchmark
call `append` with the same format. `RecordReader` reads the files incrementally while the
scenario runs.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

#: The directory the records go to, passed to consumer processes in their environment.
ENV_RECORD_DIR = "EHB_RECORD_DIR"
SUFFIX = ".rec"


class _Event(Protocol):
    @property
    def sequence_number(self) -> int: ...


def runs(sequence_numbers: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted sequence numbers as contiguous ``(first, last)`` runs."""
    result: list[tuple[int, int]] = []
    for n in sorted(sequence_numbers):
        if result and n == result[-1][1] + 1:
            result[-1] = (result[-1][0], n)
        else:
            result.append((n, n))
    return result


def format_line(
    *, at: float, pod: str, partition: str, epoch: int, sequence_numbers: Iterable[int]
) -> str:
    spans = ",".join(f"{a}-{b}" for a, b in runs(sequence_numbers))
    return f"{at:.3f} {pod} {partition} {epoch} {spans}\n"


def append(
    directory: str | Path,
    *,
    pod: str,
    partition: str,
    epoch: int,
    sequence_numbers: Sequence[int],
    at: float | None = None,
) -> None:
    """Record one processed batch (one ``write``, so a kill cannot leave half a line)."""
    if not sequence_numbers:
        return
    line = format_line(
        at=time.time() if at is None else at,
        pod=pod,
        partition=partition,
        epoch=epoch,
        sequence_numbers=sequence_numbers,
    )
    fd = os.open(
        os.path.join(directory, f"{pod}{SUFFIX}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def process(events: Sequence[_Event], context: Any) -> None:
    """The demo's handler: record the batch, nothing else (the work is not the point)."""
    append(
        os.environ[ENV_RECORD_DIR],
        pod=context.pod,
        partition=context.partition,
        epoch=context.epoch,
        sequence_numbers=[e.sequence_number for e in events],
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Batch:
    """One recorded line."""

    at: float
    pod: str
    partition: str
    epoch: int
    spans: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        return sum(b - a + 1 for a, b in self.spans)

    def sequence_numbers(self) -> Iterator[int]:
        for a, b in self.spans:
            yield from range(a, b + 1)


def parse_line(line: str) -> Batch | None:
    """A recorded line, or None when it is incomplete or not one of ours."""
    parts = line.split()
    if len(parts) != 5:
        return None
    try:
        spans = tuple(
            (int(a), int(b)) for a, b in (span.split("-", 1) for span in parts[4].split(","))
        )
        return Batch(
            at=float(parts[0]), pod=parts[1], partition=parts[2], epoch=int(parts[3]), spans=spans
        )
    except ValueError:
        return None


class RecordReader:
    """Reads every pod's record file incrementally (only complete lines)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}

    def read_new(self) -> list[Batch]:
        batches: list[Batch] = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            if end == 0:
                continue
            self._offsets[path] = offset + end
            for line in data[:end].decode().splitlines():
                batch = parse_line(line)
                if batch is not None:
                    batches.append(batch)
        batches.sort(key=lambda b: b.at)
        return batches


@dataclasses.dataclass
class Tally:
    """Every (partition, sequence number) processed, how often, and the time of each repeat."""

    counts: collections.Counter[tuple[str, int]] = dataclasses.field(
        default_factory=collections.Counter
    )
    #: The time of every processing after the first: the duplicates, for attribution to steps.
    repeats: list[tuple[float, str, int]] = dataclasses.field(default_factory=list)
    #: The highest sequence number processed per partition.
    highest: dict[str, int] = dataclasses.field(default_factory=dict)
    processed: int = 0

    def add(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            top = self.highest.get(batch.partition, -1)
            for n in batch.sequence_numbers():
                key = (batch.partition, n)
                self.counts[key] += 1
                if self.counts[key] > 1:
                    self.repeats.append((batch.at, batch.partition, n))
                else:
                    self.processed += 1
                top = max(top, n)
            self.highest[batch.partition] = top

    @property
    def duplicates(self) -> int:
        return len(self.repeats)

    def missing(self, produced: dict[str, int]) -> list[tuple[str, int]]:
        """Events produced (``{partition: count}``, sequence numbers from 0) never processed."""
        return [
            (partition, n)
            for partition, count in produced.items()
            for n in range(count)
            if (partition, n) not in self.counts
        ]
