"""A batch whose handler kills the process (a segfault, ``os._exit``, the OOM killer), on fake
time against the in-memory fakes: the pod's next process finds the crash marker its
predecessor left and counts the death as a failed attempt of the batch, under the failure
policy of a raised error. A "death" here is what SIGKILL leaves: the runtime stops where it
stands, and the marker directory holds what it held while the handler ran."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from eventhub_balancer.consumer import (
    assignments,
    connections,
    contexts,
    crashmarkers,
    markerfiles,
    partitions,
    processing,
    runtime,
)
from tests.consumer import policyfakes
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

BATCH = partitions.BatchSettings(
    batch_size=10, max_wait=0.05, retry_backoff=0.01, retry_backoff_max=0.05
)


class Killer(consumerfakes.Recorder):
    """A handler that "kills the process" on the events in ``poison``: the call never returns
    (`died` is set), as a handler whose process is gone never does. ``slow``: seconds every
    other call takes."""

    def __init__(self, *, poison: set[tuple[str, int]], slow: float = 0.0) -> None:
        super().__init__()
        self.poison = poison
        self.duration = slow
        self.died = asyncio.Event()
        self.running = 0
        #: The calls that "killed the process" (and the raised ones the test adds).
        self.deaths: list[contexts.BatchContext] = []
        #: The most handler calls that ran at once while a given partition's call ran.
        self.beside: dict[str, int] = {}

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        self.running += 1
        try:
            if any((e.partition, e.sequence_number) in self.poison for e in events):
                self.deaths.append(context)
                self.died.set()
                await asyncio.Event().wait()
            await super().__call__(events, context)
        finally:
            self.running -= 1

    def attempts(self, partition: str) -> list[int]:
        """The attempt numbers of the poison calls on ``partition``."""
        return [c.attempt for c in self.deaths if c.partition == partition]


@contextlib.asynccontextmanager
async def pod(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore,
    handler: processing.BatchProcessor,
    directory: Path,
    *,
    dead: policyfakes.FakeDeadLetters | None = None,
    uid: str = "uid-a",
    batch: partitions.BatchSettings = BATCH,
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    """One process of pod-a, its crash markers in ``directory``."""
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders", pod="pod-a", batch=batch, shutdown_timeout=2.0
        ),
        source=source,
        backends=policyfakes.Backends({"orders": (hub, store.handle("pod-a"))}, dead_letters=dead),
        processor=handler,
        exit_process=lambda reason: None,
        crash_markers=crashmarkers.CrashMarkers(directory, pod="pod-a", pod_uid=uid),
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(10):
            await task


async def died(consumer: runtime.Runtime, directory: Path) -> None:
    """SIGKILL while the handler runs: nothing is released or written any more, and the
    markers stay as they stood."""
    left = snapshot(directory)
    consumer._drain = _nothing  # type: ignore[method-assign]
    calls = [w.batches._call for w in consumer.workers.values()]
    for task in [*consumer._tasks.values(), *(c for c in calls if c is not None)]:
        task.cancel()
    consumer.request_shutdown()
    await asyncio.sleep(1)
    restore(directory, left)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.glob("*.marker")}


def restore(directory: Path, left: dict[str, bytes]) -> None:
    for path in directory.glob("*.marker"):
        path.unlink()
    for name, raw in left.items():
        (directory / name).write_bytes(raw)


def markers_in(directory: Path) -> list[str]:
    """The files that hold a call in the handler (not a cleared record)."""
    return sorted(p.name for p in directory.glob("*.marker") if markerfiles.decode(p.read_bytes()))


async def _nothing() -> None:
    return None


def assignment(epoch: int = 1, *, attempts: int = 3, on_failure: str = "park") -> dict[str, object]:
    return consumerfakes.configmap(
        1,
        {"0": (epoch, "owned"), "1": (epoch, "owned")},
        processing=json.dumps({"maxAttempts": attempts, "onFailure": on_failure}),
    )


async def test_each_death_in_the_handler_is_a_failed_attempt_until_the_partition_is_parked(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """Before, every new process handed the same batch to the handler as attempt 1, for
    ever. Now the deaths count: attempts 1, 2, 3 die; the fourth process parks the partition
    without calling the handler, reports why, and partition 1 goes on throughout."""
    fake_hub.append("0", 30)
    fake_hub.append("1", 30)
    seen: list[int] = []
    for _ in range(3):
        killer = Killer(poison={("0", 12)})
        async with pod(fake_hub, fake_store, killer, tmp_path) as (consumer, source):
            source.put(assignment())
            async with asyncio.timeout(10):
                await killer.died.wait()
            seen += killer.attempts("0")
            await died(consumer, tmp_path)
    assert seen == [1, 2, 3]
    assert fake_store.blobs["0"].sequence_number == 9  # never past the batch 10-19

    killer = Killer(poison={("0", 12)})
    async with pod(fake_hub, fake_store, killer, tmp_path) as (consumer, source):
        source.put(assignment())
        await consumerfakes.eventually(lambda: "0" in source.reports, what="the report")
        report = source.reports["0"]
        assert (report.state, report.epoch, report.attempts) == ("parked", 1, 3)
        assert report.error == (
            "ProcessDied: the process died in the handler on attempt 3 (killed by a signal, "
            "out of memory, or exited) and its container restarted"
        )
        assert consumer.stats["0"].parked
        assert killer.attempts("0") == []  # parked without calling the handler again
        await consumerfakes.eventually(lambda: fake_store.blobs["1"].sequence_number == 29)
        assert consumer.ready()[0]
    assert fake_store.blobs["0"].sequence_number == 9


async def test_deaths_count_under_a_checkpoint_interval_that_left_the_checkpoint_behind(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """--checkpoint-interval 30: the batches before the killer were handled but not
    checkpointed when the process died, so every next process starts before the killer's
    batch, and its first batch never matched the marker. Before, no death was ever counted
    (attempts 1, 1, 1 ... for ever). Now the marker waits for its batch, the batches before it
    are checkpointed at once, and the deaths count until the partition is parked."""
    fake_hub.append("0", 40)
    interval = dataclasses.replace(BATCH, checkpoint_interval=30.0)
    seen: list[int] = []
    for _ in range(3):
        killer = Killer(poison={("0", 22)})
        async with pod(fake_hub, fake_store, killer, tmp_path, batch=interval) as (
            consumer,
            source,
        ):
            source.put(assignment())
            async with asyncio.timeout(10):
                await killer.died.wait()
            seen += killer.attempts("0")
            await died(consumer, tmp_path)
    assert seen == [1, 2, 3]

    killer = Killer(poison={("0", 22)})
    async with pod(fake_hub, fake_store, killer, tmp_path, batch=interval) as (consumer, source):
        source.put(assignment())
        await consumerfakes.eventually(lambda: "0" in source.reports, what="the report")
        assert (source.reports["0"].state, source.reports["0"].attempts) == ("parked", 3)
        assert killer.attempts("0") == []
    assert fake_store.blobs["0"].sequence_number == 19  # never past the batch 20-29


async def test_a_batch_dead_lettered_after_deaths_lets_the_partition_go_on(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """A raised failure and a death count alike: attempt 1 raises, attempt 2 dies; the next
    process dead-letters the batch (maxAttempts 2) and processes what follows."""
    fake_hub.append("0", 25)
    dead = policyfakes.FakeDeadLetters()
    killer = Killer(poison={("0", 12)})
    original = killer.__call__

    async def raise_first(
        events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        if context.partition == "0" and context.attempt == 1 and events[0].sequence_number == 10:
            killer.deaths.append(context)
            raise RuntimeError("raised first")
        await original(events, context)

    async with pod(fake_hub, fake_store, raise_first, tmp_path, dead=dead) as (consumer, source):
        source.put(assignment(attempts=2, on_failure="deadLetter"))
        async with asyncio.timeout(10):
            await killer.died.wait()
        assert killer.attempts("0") == [1, 2]
        await died(consumer, tmp_path)

    after = Killer(poison=set())
    async with pod(fake_hub, fake_store, after, tmp_path, dead=dead) as (consumer, source):
        source.put(assignment(attempts=2, on_failure="deadLetter"))
        await consumerfakes.eventually(lambda: ("0", 24) in after.done, what="the rest")
        events, error, attempts, who, epoch = dead.written["0/10-19"]
        assert events == [("0", n) for n in range(10, 20)]
        assert (attempts, who, epoch) == (2, "pod-a", 1)
        assert error.startswith("ProcessDied: the process died in the handler on attempt 2")
        assert not {("0", n) for n in range(10, 20)} & set(after.done)
        assert consumer.stats["0"].dead_lettered_events == 10
        await consumerfakes.eventually(lambda: not source.reports, what="the report cleared")
    assert fake_store.blobs["0"].sequence_number == 24
    assert markers_in(tmp_path) == []  # every call's marker cleared after it


async def test_a_marker_of_another_epoch_or_pod_or_batch_or_unreadable_counts_nothing(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_hub.append("0", 15)
    fake_hub.append("1", 15)
    fake_hub.append("2", 15)
    fake_hub.append("3", 15)
    location = crashmarkers.location_of(
        connections.Coordinates.of(assignments.from_configmap(assignment()))
    )

    def marker(partition: str, **changes: object) -> None:
        fields: dict[str, object] = {
            "pod": "pod-a",
            "pod_uid": "uid-a",
            "location": location,
            "partition": partition,
            "epoch": 1,
            "first": 0,
            "last": 9,
            "attempt": 9,
        }
        fields.update(changes)
        (tmp_path / f"pod-a--{partition}.marker").write_bytes(
            markerfiles.Marker(**fields).encode()  # type: ignore[arg-type]
        )

    marker("0", epoch=0)  # left by the partition's previous epoch
    marker("1", pod_uid="uid-old")  # another pod of the same name (a StatefulSet's earlier one)
    marker("2", first=5)  # the checkpoint moved past the batch it names
    torn = markerfiles.Marker(
        pod="pod-a",
        pod_uid="uid-a",
        location=location,
        partition="3",
        epoch=1,
        first=0,
        last=9,
        attempt=9,
    ).encode()[:60]  # a write cut short
    (tmp_path / "pod-a--3.marker").write_bytes(torn)
    recorder = Killer(poison=set())
    caplog.set_level(logging.INFO, logger="eventhub_balancer.consumer.crashmarkers")
    async with pod(fake_hub, fake_store, recorder, tmp_path) as (_, source):
        source.put(
            consumerfakes.configmap(
                1, {p: (1, "owned") for p in "0123"}, processing=json.dumps({"maxAttempts": 1})
            )
        )
        await consumerfakes.eventually(
            lambda: all((p, 14) in recorder.done for p in "0123"), what="every partition"
        )
        assert source.reports == {}
        assert {c.attempt for c in recorder.contexts} == {1}
    text = caplog.text
    assert "crash marker of epoch 0 ignored (now epoch 1)" in text
    assert "another pod's (uid 'uid-old')" in text
    assert "batch from sequence number 5, which is not this batch (from 0): not counted" in text
    assert "pod-a--3.marker ignored and removed: unreadable (a torn record" in text


async def test_batches_in_the_handler_together_at_a_death_run_alone_until_it_is_pinned(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """The slow batches of partitions 1 and 2 were in the handler when partition 0's killed
    the process: three markers are left, and any of them may be the killer. The death counts
    for none; the next process runs each of the three alone, so 0 dies on its own, and the
    process after that counts that death on 0 only: 1's and 2's batches are never given up,
    even under maxAttempts 2."""
    fake_hub.append("0", 10)
    fake_hub.append("1", 10)
    fake_hub.append("2", 10)
    everything = {p: (1, "owned") for p in "012"}
    policy = {"processing": json.dumps({"maxAttempts": 2, "onFailure": "park"})}
    first = Killer(poison={("0", 5)}, slow=5.0)
    async with pod(fake_hub, fake_store, first, tmp_path) as (consumer, source):
        source.put(consumerfakes.configmap(1, everything, **policy))
        async with asyncio.timeout(10):
            await first.died.wait()
        await asyncio.sleep(0.1)
        assert markers_in(tmp_path) == [
            "pod-a--0.marker",
            "pod-a--1.marker",
            "pod-a--2.marker",
        ]
        await died(consumer, tmp_path)

    second = Killer(poison={("0", 5)}, slow=1.0)
    async with pod(fake_hub, fake_store, second, tmp_path) as (consumer, source):
        watch = asyncio.create_task(_overlaps(second, consumer))
        source.put(consumerfakes.configmap(1, everything, **policy))
        async with asyncio.timeout(30):
            await second.died.wait()
        await asyncio.sleep(0.1)
        watch.cancel()
        (overlaps,) = await asyncio.gather(watch, return_exceptions=True)
        assert isinstance(overlaps, asyncio.CancelledError), overlaps
        assert markers_in(tmp_path) == ["pod-a--0.marker"]
        assert second.attempts("0") == [1]  # the death it shared was not counted
        await died(consumer, tmp_path)

    third = Killer(poison={("0", 5)})
    async with pod(fake_hub, fake_store, third, tmp_path) as (consumer, source):
        source.put(consumerfakes.configmap(1, everything, **policy))
        await consumerfakes.eventually(lambda: "0" in source.reports)
        assert (source.reports["0"].state, source.reports["0"].attempts) == ("failing", 1)
        await consumerfakes.eventually(lambda: third.died.is_set())
        assert third.attempts("0") == [2]
        # The batches that shared the first death never counted one: done, not given up.
        await consumerfakes.eventually(
            lambda: all(fake_store.blobs[p].sequence_number == 9 for p in "12")
        )
        assert set(source.reports) == {"0"}


async def _overlaps(handler: Killer, consumer: runtime.Runtime) -> None:
    while True:
        await asyncio.sleep(0.01)
        assert handler.running <= 1, "a batch left at the death ran beside another call"


def test_an_unwritable_directory_turns_the_markers_off_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    markers = crashmarkers.CrashMarkers(blocker / "markers", pod="pod-a")
    assert markers.directory is None
    assert "crash markers off: cannot write" in caplog.text
    assert "--crash-marker-dir" in caplog.text


def test_ehb_consume_defaults_to_the_runtimes_directory() -> None:
    """``--help`` spells the default without importing the runtime: the two must agree."""
    from eventhub_balancer.cli import consume

    assert consume.DEFAULT_CRASH_MARKER_DIR == crashmarkers.DEFAULT_DIRECTORY
