"""What a crash marker costs a handler call, counted in file system calls (never in time),
and what its file holds when a write is torn, on fake time against the in-memory fakes.

Before, each handler call created a file, renamed it over the partition's marker and removed
it after the call: three path operations (a lookup, an inode made, two directory entries
changed), about 60 µs on ext4, a visible share of the drain with batches of a few events.
Now the partition's file is opened once, and a call is two writes into it in place."""

from __future__ import annotations

import builtins
import dataclasses
import errno
import io
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.consumer import contexts, crashmarkers, markerfiles, partitions
from tests.consumer.test_crash_markers import pod
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

REAL_OPEN = io.open


class FileCalls:
    """The file system calls made on the files in ``directory``, by name, in order: every
    ``os`` call that takes a path or a descriptor of one, and ``open`` (whose write and close
    then count with it)."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = str(directory)
        self.calls: list[str] = []
        self.descriptors: set[int] = set()
        for name in ("replace", "rename", "unlink", "remove", "truncate", "link", "symlink"):
            monkeypatch.setattr(os, name, self._on_path(name, getattr(os, name)))
        for name in ("pwrite", "write", "fsync", "fdatasync", "ftruncate", "close"):
            monkeypatch.setattr(os, name, self._on_descriptor(name, getattr(os, name)))
        monkeypatch.setattr(os, "open", self._opening(os.open))
        monkeypatch.setattr(io, "open", self._on_path("open", io.open))
        monkeypatch.setattr(builtins, "open", self._on_path("open", builtins.open))

    def _here(self, path: Any) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(self.directory)

    def _on_path(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(path: Any, *args: Any, **kwargs: Any) -> Any:
            if self._here(path):
                self.calls.append(name)
            return call(path, *args, **kwargs)

        return counted

    def _on_descriptor(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(descriptor: int, *args: Any, **kwargs: Any) -> Any:
            if descriptor in self.descriptors:
                self.calls.append(name)
                if name == "close":
                    self.descriptors.discard(descriptor)
            return call(descriptor, *args, **kwargs)

        return counted

    def _opening(self, call: Callable[..., int]) -> Callable[..., int]:
        def counted(path: Any, *args: Any, **kwargs: Any) -> int:
            descriptor = call(path, *args, **kwargs)
            if self._here(path):
                self.calls.append("open")
                self.descriptors.add(descriptor)
            return descriptor

        return counted


def read(path: Path) -> bytes:
    with REAL_OPEN(path, "rb") as f:
        return f.read()


async def test_a_handler_call_costs_two_writes_into_a_file_kept_open(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight batches of five: before, every call was open (and write and close), rename and
    unlink of a path; now one open for the worker, two writes per call (the marker, then the
    cleared record), and the file closed and removed when the worker ends. The marker stands
    in the file while the handler runs."""
    fake_hub.append("0", 40)
    calls = FileCalls(tmp_path, monkeypatch)
    standing: list[markerfiles.Marker | None] = []

    async def handler(
        events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        standing.append(markerfiles.decode(read(tmp_path / "pod-a--0.marker")))

    fives = dataclasses.replace(partitions.BatchSettings(), batch_size=5, max_wait=0.05)
    async with pod(fake_hub, fake_store, handler, tmp_path, batch=fives) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(
            lambda: "0" in fake_store.blobs and fake_store.blobs["0"].sequence_number == 39
        )
    assert [(m.first, m.last, m.attempt) if m else None for m in standing] == [
        (n, n + 4, 1) for n in range(0, 40, 5)
    ]
    assert calls.calls == ["open", *["pwrite"] * (2 * 8), "close", "unlink"]
    assert os.listdir(tmp_path) == []


def test_a_record_cut_short_or_of_another_schema_is_no_marker() -> None:
    marker = markerfiles.Marker(
        pod="pod-a",
        pod_uid="uid-a",
        location="l",
        partition="0",
        epoch=2,
        first=10,
        last=19,
        attempt=3,
    )
    record = marker.encode()
    assert len(record) == markerfiles.RECORD_SIZE
    assert markerfiles.decode(record) == marker
    assert markerfiles.decode(markerfiles.CLEARED) is None
    whole = markerfiles.HEADER.size + markerfiles.HEADER.unpack_from(record)[1]
    for cut in range(whole):
        with pytest.raises(ValueError, match=r"header|torn record"):
            markerfiles.decode(record[:cut])
    flipped = bytearray(record)
    flipped[markerfiles.HEADER.size + 5] ^= 0x01  # a byte of the body written, the rest not
    with pytest.raises(ValueError, match="torn record"):
        markerfiles.decode(bytes(flipped))
    other = markerfiles.frame(record[markerfiles.HEADER.size : whole].replace(b'": 2', b'": 1', 1))
    with pytest.raises(ValueError, match="not a crash marker of this version"):
        markerfiles.decode(other)


def test_a_call_that_outlives_its_worker_clears_its_marker_before_the_file_goes(
    tmp_path: Path,
) -> None:
    files = markerfiles.MarkerFiles(tmp_path, pod="pod-a")
    body = markerfiles.body(markerfiles.identity("pod-a", "u", "l", "0", 1), 10, 19, 1)
    files.enter("0", body)
    files.close("0")  # the worker ended, its sync handler's thread still runs
    assert markerfiles.decode(read(tmp_path / "pod-a--0.marker")) is not None
    files.leave("0", body)
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_turns_the_markers_off_and_removes_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk full after the first call: one warning, and no marker left standing that
    a later death outside the handler would count."""
    markers = crashmarkers.CrashMarkers(tmp_path, pod="pod-a")
    body = markerfiles.body(markerfiles.identity("pod-a", "", "l", "0", 1), 10, 19, 1)
    markers.enter("0", body)
    markers.leave("0", body)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    caplog.set_level(logging.WARNING)
    markers.enter("0", body)
    markers.leave("0", body)
    markers.enter("1", body)
    assert markers.directory is None
    assert [r.getMessage() for r in caplog.records if "crash markers off" in r.getMessage()] == [
        f"crash markers off: cannot write {tmp_path} ([Errno 28] No space left on device); a "
        "batch whose handler kills the process will not be counted as failing: mount a "
        "writable emptyDir there or set --crash-marker-dir"
    ]
    assert list(tmp_path.iterdir()) == []
