"""A checkpoint past its partition's end (the hub created again under its name, or the blob
edited), on fake loop time: the worker's side against the consumer fakes, the decision
(`connections._check_position`) against the SDK fakes of ``tests.support.sdkclients``.

Received from such a checkpoint, the partition waited for events after a number it may
never reach, skipped every event below it, and said nothing. Now the fenced checkpoint is
compared with the partition's last event while the receive link opens; one past it is moved
back to the start position before any event reaches the handler.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import receiving
from eventhub_balancer.consumer import connections, metrics, partitions
from eventhub_balancer.contracts import checkpointblobs, startpositions
from tests.support import consumerfakes, sdkclients

pytestmark = pytest.mark.looptime

SETTINGS = partitions.BatchSettings(batch_size=10, max_wait=0.05, retry_backoff=0.01)
ADDRESS = receiving.EventHubAddress("local.servicebus.windows.net", "orders")


def worker(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStoreHandle,
    recorder: consumerfakes.Recorder,
    check: Any,
) -> partitions.PartitionWorker:
    return partitions.PartitionWorker(
        partition="0",
        epoch=4,
        consumer="orders",
        pod="pod-a",
        store=store,
        open_receiver=hub.open,
        resolve_start=consumerfakes.resolve_nothing,
        processor=recorder,
        settings=SETTINGS,
        stats=metrics.PartitionStats(),
        check_position=check,
    )


async def test_a_rewound_checkpoint_reopens_the_link_before_any_event_is_handled() -> None:
    hub = consumerfakes.FakeHub()
    hub.append("0", 10)
    fakes = consumerfakes.FakeStore()
    fakes.blobs["0"] = consumerfakes.FakeCheckpoint(1000, "10000", 3, "old-pod")
    store = fakes.handle("pod-a")
    recorder = consumerfakes.Recorder()
    checked_at: list[tuple[float, int]] = []

    async def check(partition: str, checkpoint: Any) -> Any:
        # The link opened first: the check costs the take-up no time of its own.
        checked_at.append((consumerfakes.loop_time(), len(hub.receivers)))
        await asyncio.sleep(0.2)  # Event Hubs' answer
        rewound = consumerfakes.FakeCheckpoint(-1, "-1", 4, "pod-a")
        fakes.blobs[partition] = rewound
        return rewound

    running = worker(hub, store, recorder, check)
    task = asyncio.create_task(running.run())
    await consumerfakes.eventually(lambda: len(recorder.done) == 10, what="events 0..9")
    assert checked_at == [(pytest.approx(0.0), 1)]
    first, second = hub.receivers
    assert first.closed
    assert first.next == 1001  # opened right after the old checkpoint
    assert second.handed_out == 9
    hub.append("0", 2)
    await consumerfakes.eventually(lambda: len(recorder.done) == 12, what="events 10..11")
    running.release()
    async with asyncio.timeout(30):
        assert await task == "released"
    assert recorder.done == [("0", n) for n in range(12)]
    assert fakes.blobs["0"].sequence_number == 11


async def test_a_checkpoint_within_the_stream_is_received_from_at_once() -> None:
    hub = consumerfakes.FakeHub()
    hub.append("0", 10)
    store = consumerfakes.FakeStore().handle("pod-a")
    recorder = consumerfakes.Recorder()

    async def check(partition: str, checkpoint: Any) -> Any:
        return None

    running = worker(hub, store, recorder, check)
    task = asyncio.create_task(running.run())
    await consumerfakes.eventually(lambda: len(recorder.done) == 10, what="events 0..9")
    running.release()
    async with asyncio.timeout(30):
        assert await task == "released"
    assert len(hub.receivers) == 1


async def test_a_check_that_cannot_be_answered_fails_the_worker_before_any_event() -> None:
    """The runtime starts it again after its backoff; nothing was handled or written."""
    hub = consumerfakes.FakeHub()
    hub.append("0", 10)
    fakes = consumerfakes.FakeStore()
    store = fakes.handle("pod-a")
    recorder = consumerfakes.Recorder()

    async def check(partition: str, checkpoint: Any) -> Any:
        await asyncio.sleep(15)
        raise errors.EventHubUnreachable("partition 0: cannot read its properties: TimeoutError")

    running = worker(hub, store, recorder, check)
    async with asyncio.timeout(60):
        assert await running.run() == "failed"
    assert isinstance(running.error, errors.EventHubUnreachable)
    assert recorder.calls == 0
    assert fakes.history == {}
    assert all(r.closed for r in hub.receivers)


# -- the decision, against the SDK fakes


@dataclasses.dataclass
class OwnedStore:
    """What `_check_position` needs of the checkpoint store: the rewind it asks for."""

    rewound: list[checkpointblobs.Position] = dataclasses.field(default_factory=list)

    async def rewind(self, partition: str, position: checkpointblobs.Position) -> Any:
        self.rewound.append(position)
        return position


def hub_with(monkeypatch: pytest.MonkeyPatch, partition: sdkclients.FakePartition) -> None:
    hub = sdkclients.FakeEventHub({"0": partition})
    monkeypatch.setattr(receiving, "make_client", hub.client)


async def check(
    sequence_number: int, start: startpositions.StartPosition, store: OwnedStore | None = None
) -> Any:
    fenced = checkpointblobs.Position(offset="", sequence_number=sequence_number)
    return await connections._check_position(
        store or OwnedStore(),  # type: ignore[arg-type]
        ADDRESS,
        "0",
        start,
        fenced,
    )


@pytest.mark.parametrize("sequence_number", [-1, 0, 99])
async def test_a_checkpoint_up_to_the_last_event_stands(
    monkeypatch: pytest.MonkeyPatch, sequence_number: int
) -> None:
    partition = sdkclients.FakePartition(100)
    hub_with(monkeypatch, partition)
    store = OwnedStore()
    assert await check(sequence_number, startpositions.EARLIEST, store) is None
    assert store.rewound == []
    # Nothing processed is before every event: Event Hubs is not even asked.
    assert len(partition.properties_reads) == (0 if sequence_number < 0 else 1)


FROM_5 = startpositions.FromEnqueuedTime(enqueued_time=sdkclients.enqueued_time(5))


@pytest.mark.parametrize(
    ("start", "seeded"),
    [
        (startpositions.EARLIEST, checkpointblobs.Position("-1", -1)),
        (startpositions.LATEST, checkpointblobs.Position("90", 9)),
        (startpositions.FromSequenceNumber(sequence_number=3), checkpointblobs.Position("", 2)),
        (FROM_5, checkpointblobs.Position("", 4)),
    ],
)
async def test_a_checkpoint_past_the_end_goes_back_to_the_start_position(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    start: startpositions.StartPosition,
    seeded: checkpointblobs.Position,
) -> None:
    hub_with(monkeypatch, sdkclients.FakePartition(10))
    store = OwnedStore()
    with caplog.at_level(logging.WARNING):
        assert await check(1000, start, store) == seeded
    assert store.rewound == [seeded]
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "checkpoint at sequence number 1000 is past the partition's last event (9)" in said
    assert f"from startPosition {startpositions.to_json(start)}" in said


async def test_a_checkpoint_past_an_empty_partition_goes_back_to_nothing_processed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub_with(monkeypatch, sdkclients.FakePartition(0))  # the hub created again, no event yet
    store = OwnedStore()
    assert await check(1000, startpositions.EARLIEST, store) == checkpointblobs.Position("-1", -1)


async def test_a_start_position_past_the_end_too_is_refused_and_nothing_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub_with(monkeypatch, sdkclients.FakePartition(10))
    store = OwnedStore()
    with pytest.raises(errors.InvalidInput, match=r"startPosition: \{\"sequenceNumber\":500\}"):
        await check(499, startpositions.FromSequenceNumber(sequence_number=500), store)
    assert store.rewound == []
