"""A checkpoint past its partition's end, on the Event Hubs emulator and Azurite.

The hub was deleted and created again under the same name (its sequence numbers start at 0
again), or someone edited the blob: the checkpoint names an event the partition never had.
Received from there, the partition waited for events after that number, skipped every
event below it, and said nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing
from eventhub_balancer.consumer import partitions
from eventhub_balancer.contracts import checkpointblobs
from tests.support.consumerfakes import Recorder, eventually
from tests.support.fixtures.consumer import reading_pod, send_events

BATCH = partitions.BatchSettings(batch_size=100, max_wait=0.1, retry_backoff=0.05)


def store(container: Any, owner: str) -> checkpointing.CheckpointStore:
    return checkpointing.CheckpointStore(
        container,
        fully_qualified_namespace="local.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        owner_id=owner,
    )


async def test_a_checkpoint_past_the_end_starts_the_partition_again(
    consumer_emulator: Any, azurite: Any, blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cs = consumer_emulator.connection_string()
    # The old hub's checkpoint: its partition 0 had reached event 1000.
    await store(blob_container, "old-pod").fence(
        "0", 3, start=checkpointblobs.Position(offset="100000", sequence_number=1000)
    )
    await send_events(cs, "orders", {"0": 10})  # the new hub's first events
    recorder = Recorder()
    async with reading_pod(
        cs, azurite, blob_container, recorder, batch=BATCH, owned={"0": (4, "owned")}
    ):
        with caplog.at_level(logging.WARNING):
            await eventually(lambda: len(recorder.done) >= 10, within=20, what="events 0..9")
            await send_events(cs, "orders", {"0": 5})
            await eventually(lambda: len(recorder.done) >= 15, within=20, what="events 10..14")
    assert recorder.done == [("0", n) for n in range(15)]
    stored = await store(blob_container, "reader").read("0")
    assert stored is not None
    assert (stored.sequence_number, stored.epoch, stored.owner_id) == (14, 4, "pod-a")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("past the partition's last event" in line for line in said), said


async def test_rewind_moves_our_checkpoint_back_and_updates_go_on_from_there(
    blob_container: Any,
) -> None:
    owner = store(blob_container, "pod-a")
    await owner.fence("0", 4, start=checkpointblobs.Position(offset="100000", sequence_number=1000))
    rewound = await owner.rewind("0", checkpointblobs.Position(offset="-1", sequence_number=-1))
    assert (rewound.sequence_number, rewound.epoch, rewound.owner_id) == (-1, 4, "pod-a")
    written = await owner.update("0", offset="30", sequence_number=3)
    assert written.sequence_number == 3
    stored = await store(blob_container, "reader").read("0")
    assert stored is not None
    assert (stored.sequence_number, stored.epoch) == (3, 4)


async def test_rewind_is_refused_once_a_higher_epoch_holds_the_blob(blob_container: Any) -> None:
    owner = store(blob_container, "pod-a")
    await owner.fence("0", 4, start=checkpointblobs.Position(offset="100000", sequence_number=1000))
    await store(blob_container, "pod-b").fence("0", 5)
    with pytest.raises(errors.OwnershipLost):
        await owner.rewind("0", checkpointblobs.Position(offset="-1", sequence_number=-1))
    stored = await store(blob_container, "reader").read("0")
    assert stored is not None
    assert (stored.sequence_number, stored.epoch, stored.owner_id) == (1000, 5, "pod-b")


@pytest.mark.parametrize("down", [0.0, 5.0])
async def test_an_emulator_restarted_under_a_running_pod_is_read_from_its_start(
    azurite: Any, blob_container: Any, down: float
) -> None:
    """The local emulator keeps its events in memory: a restart gives every partition a new
    stream from sequence number 0 (as a hub deleted and created again does on Azure), while
    the pod's link reconnects after the last event it had received: by the SDK's own retry
    (by offset) when the emulator is back at once, by the receiver's reopen (by sequence
    number) when it is down longer."""
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

    before = EventHubsEmulator(hubs={"orders": 4})
    before.start_in_thread()
    after = EventHubsEmulator(hubs={"orders": 4}, port=before.port)
    cs = before.connection_string()
    recorder = Recorder()
    try:
        async with reading_pod(
            cs, azurite, blob_container, recorder, batch=BATCH, owned={"0": (1, "owned")}
        ):
            await send_events(cs, "orders", {"0": 10})
            await eventually(lambda: len(recorder.done) >= 10, within=20, what="events 0..9")
            before.stop_in_thread()
            # Down longer than the SDK's own reconnects: the receiver's reopen finds the new one.
            await asyncio.sleep(down)
            after.start_in_thread()
            await send_events(cs, "orders", {"0": 5})  # the new stream's events 0..4
            await eventually(lambda: len(recorder.done) >= 15, within=60, what="new events 0..4")
    finally:
        after.stop_in_thread()
        before.stop_in_thread()
    assert recorder.done == [("0", n) for n in range(10)] + [("0", n) for n in range(5)]
    stored = await store(blob_container, "reader").read("0")
    assert stored is not None
    assert stored.sequence_number == 4
