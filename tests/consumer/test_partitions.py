"""A partition worker moves along the hand-off table: each way it can end, driven by fakes.

Every scenario names the events the worker should take; the states it goes through are
those events folded over ``handoffs.WORKER_TRANSITIONS``, and together the scenarios walk
every transition of the table. Fake loop time: nothing waits in real time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from eventhub_balancer import handoffs
from eventhub_balancer.consumer import metrics, partitions
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

SETTINGS = partitions.BatchSettings(
    batch_size=10, max_wait=0.05, retry_backoff=0.01, checkpoint_interval=3600
)


class Scene:
    """A worker on partition 0, epoch 1, with its fakes."""

    def __init__(self) -> None:
        self.hub = consumerfakes.FakeHub()
        self.store = consumerfakes.FakeStore()
        self.handle = self.store.handle("pod-a")
        self.recorder = consumerfakes.Recorder()
        #: While set and not open, resolving the start position waits (a slow fence).
        self.start_gate: asyncio.Event | None = None
        self.worker = partitions.PartitionWorker(
            partition="0",
            epoch=1,
            consumer="orders",
            pod="pod-a",
            store=self.handle,
            open_receiver=self.hub.open,
            resolve_start=self._resolve_start,
            processor=self.recorder,
            settings=SETTINGS,
            stats=metrics.PartitionStats(),
        )

    async def _resolve_start(self, partition: str) -> Any:
        if self.start_gate is not None:
            await self.start_gate.wait()
        return None

    async def run(self, drive: Callable[[Scene], Awaitable[None]]) -> handoffs.Outcome:
        task = asyncio.create_task(self.worker.run())
        await drive(self)
        async with asyncio.timeout(60):
            return await task

    async def processed(self, count: int) -> None:
        await consumerfakes.eventually(lambda: len(self.recorder.done) == count)


async def revoked_while_fencing(scene: Scene) -> None:
    scene.start_gate = asyncio.Event()
    await asyncio.sleep(1)
    scene.worker.release()
    scene.start_gate.set()


async def revoked_while_running(scene: Scene) -> None:
    scene.hub.append("0", 3)
    await scene.processed(3)
    scene.worker.release()


async def lost_at_the_fence(scene: Scene) -> None:
    # Set up before the worker's task first runs: a newer owner holds the blob already.
    await scene.store.handle("pod-b").fence("0", 2, start=None)


async def lost_while_running(scene: Scene) -> None:
    scene.hub.append("0", 3)
    await scene.processed(3)
    scene.hub.claim("0", 2)  # a receiver with a higher owner level


async def lost_while_releasing(scene: Scene) -> None:
    scene.hub.append("0", 3)
    await scene.processed(3)
    await scene.store.handle("pod-b").fence("0", 2, start=None)
    scene.worker.release()  # the final checkpoint finds the newer owner


async def failed_at_the_fence(scene: Scene) -> None:
    scene.handle.fail_fences = 1


async def failed_while_running(scene: Scene) -> None:
    scene.hub.append("0", 3)
    await scene.processed(3)
    scene.hub.fail("0")


async def failed_while_releasing(scene: Scene) -> None:
    scene.hub.append("0", 3)
    await scene.processed(3)
    scene.handle.fail_updates = 1
    scene.worker.release()  # the final checkpoint cannot be written


SCENARIOS: dict[str, tuple[Callable[[Scene], Awaitable[None]], Sequence[handoffs.WorkerEvent]]] = {
    "revoked while fencing": (revoked_while_fencing, ["revoked"]),
    "revoked while running": (revoked_while_running, ["fenced", "revoked", "checkpointed"]),
    "lost at the fence": (lost_at_the_fence, ["ownership_lost"]),
    "lost while running": (lost_while_running, ["fenced", "ownership_lost"]),
    "lost while releasing": (lost_while_releasing, ["fenced", "revoked", "ownership_lost"]),
    "failed at the fence": (failed_at_the_fence, ["error"]),
    "failed while running": (failed_while_running, ["fenced", "error"]),
    "failed while releasing": (failed_while_releasing, ["fenced", "revoked", "error"]),
}


def walk(events: Sequence[handoffs.WorkerEvent]) -> list[handoffs.WorkerState]:
    def step(path: list[handoffs.WorkerState], event: handoffs.WorkerEvent) -> list[Any]:
        return [*path, handoffs.next_worker_state(path[-1], event)]

    start: list[handoffs.WorkerState] = ["fencing"]
    return functools.reduce(step, events, start)


def test_the_scenarios_walk_every_transition_and_reach_every_outcome() -> None:
    walked = set()
    ends = set()
    for _, events in SCENARIOS.values():
        path = walk(events)
        walked.update(zip(path, events, strict=False))
        ends.add(path[-1])
    assert walked == set(handoffs.WORKER_TRANSITIONS)
    assert ends == set(handoffs.OUTCOMES)


@pytest.mark.parametrize("name", SCENARIOS)
async def test_a_worker_moves_along_the_table_to_its_outcome(name: str) -> None:
    drive, events = SCENARIOS[name]
    scene = Scene()
    outcome = await scene.run(drive)
    expected = walk(events)
    assert scene.worker.path == expected
    assert scene.worker.state == outcome == expected[-1]
    # What each ending leaves behind in the checkpoint blob.
    blob = scene.store.blobs.get("0")
    if name == "revoked while running":
        assert blob is not None
        assert (blob.epoch, blob.sequence_number) == (1, 2)
    elif name.startswith("lost"):
        assert scene.store.history.get("0") is None  # nothing written once lost
        assert blob is not None
        assert blob.epoch == (1 if name == "lost while running" else 2)
    if name == "revoked while fencing":
        assert scene.hub.receivers == []  # the fence was the final checkpoint
    if outcome != "released":
        assert scene.worker.error is not None


async def test_a_worker_refuses_moves_the_table_does_not_have() -> None:
    scene = Scene()
    task = asyncio.create_task(scene.worker.run())
    await consumerfakes.eventually(lambda: scene.worker.state == "running")
    for event in ("fenced", "checkpointed"):
        with pytest.raises(handoffs.IllegalTransition) as caught:
            scene.worker.transition(event)
        assert (caught.value.state, caught.value.event) == ("running", event)
    assert scene.worker.path == ["fencing", "running"]
    scene.worker.release()
    assert await task == "released"
    # An ended worker takes no event at all.
    for event in handoffs.WORKER_EVENTS:
        with pytest.raises(handoffs.IllegalTransition):
            scene.worker.transition(event)
    assert scene.worker.state == "released"
    assert scene.worker.path == ["fencing", "running", "releasing", "released"]


async def test_a_worker_logs_its_first_events_and_its_final_checkpoint_with_their_delays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The take-up and the hand-over, each once, with the delay a slow rebalance is read from
    (`benchmarks.stages` times the stages of a hand-off from these lines)."""
    caplog.set_level(logging.INFO, logger=partitions.__name__)
    scene = Scene()

    async def drive(scene: Scene) -> None:
        await asyncio.sleep(2)
        scene.hub.append("0", 3)
        await scene.processed(3)
        scene.hub.append("0", 2)
        await scene.processed(5)
        scene.worker.release()

    assert await scene.run(drive) == "released"
    first: list[tuple[Any, ...]] = [
        tuple(r.args) for r in caplog.records if r.msg == partitions.FIRST_EVENTS and r.args
    ]
    final: list[tuple[Any, ...]] = [
        tuple(r.args) for r in caplog.records if r.msg == partitions.FINAL_CHECKPOINT and r.args
    ]
    assert len(first) == 1
    partition, epoch, count, after_ms = first[0]
    assert (partition, epoch, count) == ("0", 1, 3)
    assert after_ms >= 2000  # the events came 2 s after the worker started
    assert len(final) == 1
    assert final[0][:3] == ("0", 1, 4)


async def test_a_release_says_it_wrote_nothing_when_a_newer_owner_holds_the_blob(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pod relabelled out of the selector released, on its ConfigMap's deletion, partitions
    its replacement had already taken over, and logged "final checkpoint at sequence number
    N" for each: a write that never happened (the blob was the new owner's)."""
    caplog.set_level(logging.INFO, logger=partitions.__name__)
    scene = Scene()
    scene.worker.settings = dataclasses.replace(SETTINGS, checkpoint_interval=0)

    async def drive(scene: Scene) -> None:
        scene.hub.append("0", 3)
        await scene.processed(3)
        await asyncio.sleep(1)  # the checkpoint of sequence number 2 is written
        assert scene.store.blobs["0"].sequence_number == 2
        await scene.store.handle("pod-b").fence("0", 2, start=None)
        scene.worker.release()

    assert await scene.run(drive) == "released"
    said = [(r.msg, tuple(r.args or ())) for r in caplog.records if r.msg in WORDS]
    assert said == [(partitions.TAKEN_OVER, ("0", 1, 2))]
    assert scene.store.blobs["0"].epoch == 2  # nothing of ours written over it


WORDS = (partitions.FINAL_CHECKPOINT, partitions.TAKEN_OVER)


async def test_an_idle_partition_writes_what_the_checkpoint_interval_held_back() -> None:
    """With a checkpoint interval, a batch is not checkpointed before the interval is over; a
    partition that goes quiet after it gets its checkpoint then, without waiting for more
    events or its release (a crash would repeat the batch, and its backlog would stay)."""
    scene = Scene()
    scene.worker.settings = dataclasses.replace(SETTINGS, checkpoint_interval=10)
    written: list[int] = []

    async def drive(scene: Scene) -> None:
        scene.hub.append("0", 3)
        await scene.processed(3)
        await asyncio.sleep(5)
        written.append(scene.store.blobs["0"].sequence_number)  # within the interval
        await asyncio.sleep(6)
        written.append(scene.store.blobs["0"].sequence_number)  # quiet past it
        scene.worker.release()

    assert await scene.run(drive) == "released"
    assert written == [-1, 2]
    assert scene.store.history["0"] == [2]  # written once: the release had nothing left


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n.startswith("lost")])
async def test_a_lost_partition_is_named_once_in_its_warning(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A pod paused past podGraceSeconds logged ``partition 2: partition 2: ownership lost``
    for each partition taken over meanwhile: the loss's text names the partition already."""
    drive, _ = SCENARIOS[name]
    caplog.set_level(logging.WARNING, logger="eventhub_balancer.consumer.partitions")
    assert await Scene().run(drive) == "lost"
    [said] = [r.getMessage() for r in caplog.records if "ownership lost" in r.getMessage()]
    assert said.startswith("partition 0: ownership lost, epoch 2 "), said
    assert said.count("partition 0") == 1, said


async def test_a_batch_received_as_the_release_comes_is_not_handed_to_the_handler() -> None:
    """A batch and the release that arrive in the same turn of the loop: the batch is left
    to the next owner, who starts after the final checkpoint, instead of holding the release
    for a whole handler call (replayed in `test_handoff_model`: a 2 s call began after the
    runtime had said it was releasing the partition)."""
    scene = Scene()

    async def drive(scene: Scene) -> None:
        scene.hub.append("0", 3)
        await scene.processed(3)
        scene.hub.append("0", SETTINGS.batch_size)  # a whole batch, ready at once
        scene.worker.release()

    outcome = await scene.run(drive)
    assert outcome == "released"
    assert scene.recorder.done == [("0", 0), ("0", 1), ("0", 2)]
    assert scene.store.blobs["0"].sequence_number == 2


async def test_a_batch_waiting_for_the_last_checkpoint_is_left_to_the_next_owner() -> None:
    """The batch after a checkpoint write waits for that write (the crash bound); a release
    that comes meanwhile leaves the batch to the next owner too."""
    scene = Scene()
    scene.worker.settings = dataclasses.replace(SETTINGS, checkpoint_interval=0)
    scene.handle.gate = asyncio.Event()

    async def drive(scene: Scene) -> None:
        scene.hub.append("0", 3)
        await scene.processed(3)
        await consumerfakes.eventually(lambda: scene.handle.updates_begun == 1)
        scene.hub.append("0", SETTINGS.batch_size)
        await asyncio.sleep(1)  # received, and waiting for the write
        scene.worker.release()
        assert scene.handle.gate is not None
        scene.handle.gate.set()

    outcome = await scene.run(drive)
    assert outcome == "released"
    assert scene.recorder.done == [("0", 0), ("0", 1), ("0", 2)]
    assert scene.store.blobs["0"].sequence_number == 2


@pytest.mark.parametrize("moved", [True, False], ids=["moved meanwhile", "still ours"])
async def test_a_batch_received_before_a_long_pause_goes_to_the_handler_only_if_still_ours(
    moved: bool,
) -> None:
    """A pod frozen 40 s on the local stack (SIGSTOP) lost its partitions past podGraceSeconds,
    and the moment it ran again it handed its receiver's buffered batch to the handler, before
    anything told it of the new owner: processed twice. A batch that comes back long after it
    was asked for is checked against the checkpoint blob first (one read)."""
    scene = Scene()

    async def drive(scene: Scene) -> None:
        scene.hub.append("0", 3)
        await scene.processed(3)
        receiver = scene.hub.receivers[-1]
        real = receiver.next_batch

        async def paused(*, max_size: int, max_wait: float) -> Any:
            batch = await real(max_size=max_size, max_wait=max_wait)
            if batch.events:
                await asyncio.sleep(40)  # the process paused, the batch in its receiver
            return batch

        receiver.next_batch = paused  # type: ignore[method-assign]
        await asyncio.sleep(1)
        scene.hub.append("0", 2)
        await asyncio.sleep(25)
        if moved:  # past podGraceSeconds: the next owner fenced the blob
            await scene.store.handle("pod-b").fence("0", 2, start=None)
        await asyncio.sleep(20)
        if not moved:
            await scene.processed(5)
            scene.worker.release()

    outcome = await scene.run(drive)
    if moved:
        assert outcome == "lost"
        assert scene.recorder.done == [("0", 0), ("0", 1), ("0", 2)]
        assert scene.store.blobs["0"].epoch == 2
    else:
        assert outcome == "released"
        assert scene.recorder.done == [("0", n) for n in range(5)]
