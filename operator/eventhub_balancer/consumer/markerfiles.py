"""The crash markers' files (`crashmarkers`): one per partition, kept open while the pod
handles the partition, each handler call noted in place.

A file holds one record at offset 0, always written whole with a single ``pwrite``:

- 4 bytes ``EHBm``, the body's length and its CRC-32 (little-endian, 4 bytes each),
- the body: the marker as JSON (its schema, pod, pod uid, location, partition, epoch, first
  and last sequence numbers, attempt), or nothing for a cleared record (no call in the
  handler),
- zeros up to `RECORD_SIZE`, so that a record never leaves the tail of a longer one behind.

A record whose length or checksum does not match what follows the header (a write torn by a
crash, a file cut short, another program's file) is no marker. A handler call costs two
writes into a file that is already open: the marker before the call, the cleared record after
it. No path is looked up, created, renamed or removed per call, and nothing is fsynced: a
container restart keeps the node's page cache, and a node that goes down takes the emptyDir
with it. The file is opened at the partition's first handler call and closed and removed when
its worker ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import struct
import weakref
import zlib
from pathlib import Path

#: The version of the body; a marker of another counts nothing.
SCHEMA = 2
SUFFIX = ".marker"
MAGIC = b"EHBm"
HEADER = struct.Struct("<4sII")
#: Every record is written this long at least (a pod name of 253 characters still fits).
RECORD_SIZE = 1024


def safe(name: str) -> str:
    """A file-name-safe spelling of a pod name or partition id (one name, one spelling)."""
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name) and not name.startswith("."):
        return name
    return "x" + hashlib.sha256(name.encode()).hexdigest()[:24]


@functools.lru_cache(maxsize=4096)
def identity(pod: str, pod_uid: str, location: str, partition: str, epoch: int) -> bytes:
    """The start of the body of every marker of one partition's worker (one JSON encoding
    per worker, not per call)."""
    fixed = {
        "schema": SCHEMA,
        "pod": pod,
        "pod_uid": pod_uid,
        "location": location,
        "partition": partition,
        "epoch": epoch,
    }
    return json.dumps(fixed).encode()[:-1] + b', "first": '


def body(start: bytes, first: int, last: int, attempt: int) -> bytes:
    """A marker's body: `identity` and one call's batch and attempt."""
    return start + b'%d, "last": %d, "attempt": %d}' % (first, last, attempt)


def frame(raw: bytes) -> bytes:
    """The record of ``raw`` (a body, or b"" for a cleared record)."""
    return (HEADER.pack(MAGIC, len(raw), zlib.crc32(raw)) + raw).ljust(RECORD_SIZE, b"\0")


CLEARED = frame(b"")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Marker:
    """One handler call of one partition's batch."""

    pod: str
    pod_uid: str
    location: str
    partition: str
    epoch: int
    first: int
    last: int
    attempt: int

    def encode(self) -> bytes:
        """The record a file holds while this call is in the handler."""
        start = identity(self.pod, self.pod_uid, self.location, self.partition, self.epoch)
        return frame(body(start, self.first, self.last, self.attempt))


def decode(raw: bytes) -> Marker | None:
    """The marker a file's ``raw`` content holds (None: a cleared record); ValueError when it
    holds no record, or a torn one."""
    if len(raw) < HEADER.size:
        raise ValueError(f"{len(raw)} bytes, shorter than a record's header")
    magic, length, checksum = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise ValueError("not a crash marker record")
    content = raw[HEADER.size : HEADER.size + length]
    if len(content) != length or zlib.crc32(content) != checksum:
        raise ValueError("a torn record: its length or checksum does not match")
    if not content:
        return None
    fields = json.loads(content)
    if not isinstance(fields, dict) or fields.pop("schema", None) != SCHEMA:
        raise ValueError("not a crash marker of this version")
    strings = ("pod", "pod_uid", "location", "partition")
    numbers = ("epoch", "first", "last", "attempt")
    if set(fields) != {*strings, *numbers}:
        raise ValueError(f"fields {sorted(fields)}")
    if not all(isinstance(fields[k], str) for k in strings) or not all(
        type(fields[k]) is int and fields[k] >= 0 for k in numbers
    ):
        raise ValueError("a field of the wrong type")
    return Marker(**fields)


class MarkerFiles:
    """The open marker files of one pod's partitions, in ``directory``. Every method that
    writes raises OSError when the file system refuses."""

    def __init__(self, directory: Path, *, pod: str) -> None:
        self.directory = directory
        self.pod = pod
        #: {partition: the descriptor of its open file}, closed when the worker ends.
        self._files: dict[str, int] = {}
        #: {partition: the body in its file}: a call is in the handler.
        self._standing: dict[str, bytes] = {}
        #: Partitions whose worker ended while a call stood: closed once it leaves.
        self._closing: set[str] = set()
        # A process that never ends its workers (killed, or a test's) leaks no descriptor.
        weakref.finalize(self, _close_all, self._files)

    def path(self, partition: str) -> Path:
        return self.directory / f"{safe(self.pod)}--{safe(partition)}{SUFFIX}"

    def paths(self) -> list[Path]:
        """The files of this pod's name, sorted."""
        return sorted(self.directory.glob(f"{safe(self.pod)}--*{SUFFIX}"))

    def enter(self, partition: str, raw: bytes) -> None:
        """``raw`` (a `body`) is in the handler: one write (and an open at the first call)."""
        written = self._files.get(partition)
        if written is None:
            written = os.open(self.path(partition), os.O_RDWR | os.O_CREAT, 0o644)
            self._files[partition] = written
        self._closing.discard(partition)  # a worker of the partition uses it again
        self._standing[partition] = raw
        _write(written, frame(raw))

    def leave(self, partition: str, raw: bytes) -> None:
        """The call that entered ``raw`` ended: its record is cleared, with one write (unless
        a later call stands there now)."""
        if self._standing.get(partition) is not raw:
            return
        del self._standing[partition]
        written = self._files.get(partition)
        if written is not None:
            _write(written, CLEARED)
        if partition in self._closing:
            self.close(partition)

    def close(self, partition: str) -> None:
        """``partition``'s worker ended: its file is closed and removed, once no call of the
        worker stands in it (a call that outlives its worker clears it first)."""
        if partition in self._standing:
            self._closing.add(partition)
            return
        self._closing.discard(partition)
        written = self._files.pop(partition, None)
        if written is None:
            return  # no call since it opened: whatever a predecessor left stays
        with contextlib.suppress(OSError):
            os.close(written)
        with contextlib.suppress(OSError):
            self.path(partition).unlink()

    def close_all(self) -> None:
        """Every file closed and removed, standing calls or not (the markers are off)."""
        self._standing.clear()
        for partition in list(self._files):
            self.close(partition)


def _write(descriptor: int, record: bytes) -> None:
    if os.pwrite(descriptor, record, 0) != len(record):
        raise OSError(f"a record of {len(record)} bytes written short (is the disk full?)")


def _close_all(files: dict[str, int]) -> None:
    for descriptor in files.values():
        with contextlib.suppress(OSError):
            os.close(descriptor)
    files.clear()
