"""A checkpoint blob deleted under its owner (by hand, or with its container), on Azurite.

The owner knows its position; the blob is the only place the next owner learns it from. An
owner with new events recreates the blob with its next checkpoint; one whose partition went
quiet writes nothing new on its release, and the next owner would start the partition from
the start position (with ``earliest``: every retained event again). So a release with nothing
new to write puts its last checkpoint back when the blob is gone.

A container deleted under a running pod fails its partitions (the store says to create it)
until it is back. The pod still knows where each partition stood; when its worker starts
again at the same epoch, it writes that position back rather than the start position (with
``latest``: every event enqueued meanwhile skipped). A new owner has no such knowledge: its
fence says at WARNING that the blob of a partition that had owners before is gone.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing, checkpointtakeovers
from eventhub_balancer.consumer import metrics, partitions
from eventhub_balancer.contracts import startpositions
from tests.support import consumerfakes

BLOB = "shop.servicebus.windows.net/orders/$default/checkpoint/0"
SETTINGS = partitions.BatchSettings(batch_size=10, max_wait=0.05, retry_backoff=0.01)


def store(container: Any, owner: str) -> checkpointing.CheckpointStore:
    return checkpointing.CheckpointStore(
        container,
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        owner_id=owner,
    )


async def earliest(partition: str) -> Any:
    return startpositions.EARLIEST


def worker(
    hub: consumerfakes.FakeHub,
    owner: checkpointing.CheckpointStore,
    recorder: Any,
    resolve_start: Any = earliest,
) -> partitions.PartitionWorker:
    return partitions.PartitionWorker(
        partition="0",
        epoch=1,
        consumer="orders",
        pod="pod-a",
        store=owner,
        open_receiver=hub.open,
        resolve_start=resolve_start,
        processor=recorder,
        settings=SETTINGS,
        stats=metrics.PartitionStats(),
    )


async def delete_the_blob(container: Any) -> None:
    await container.delete_blob(BLOB)


async def recreate_the_container(container: Any) -> None:
    await container.delete_container()
    # Azure refuses a container's name for a while after its deletion; Azurite does not.
    await container.create_container()


@pytest.mark.parametrize("loss", [delete_the_blob, recreate_the_container])
async def test_a_quiet_partition_hands_its_position_on_after_its_blob_was_deleted(
    blob_container: Any, loss: Any
) -> None:
    hub = consumerfakes.FakeHub()
    hub.append("0", 3)
    recorder = consumerfakes.Recorder()
    old = store(blob_container, "pod-a")
    first = worker(hub, old, recorder)
    task = asyncio.create_task(first.run())
    await consumerfakes.eventually(
        lambda: first.stats.checkpointed_sequence_number == 2, within=30, what="checkpoint 2"
    )
    await loss(blob_container)  # and the partition stays quiet
    first.release()
    async with asyncio.timeout(30):
        assert await task == "released"
    taken = await store(blob_container, "pod-b").fence("0", 2)
    assert taken.sequence_number == 2  # not -1: the next owner does not start over


async def test_keep_reads_once_and_writes_only_a_missing_blob(blob_container: Any) -> None:
    owner = store(blob_container, "pod-a")
    assert await owner.keep("0") is None  # not ours: nothing to keep
    fenced = await owner.fence("0", 1)
    written = await owner.update("0", offset="40", sequence_number=4)
    kept = await owner.keep("0")
    assert kept is not None
    assert kept.etag.strip('"') == written.etag.strip('"') != fenced.etag.strip('"')
    await delete_the_blob(blob_container)
    await owner.keep("0")
    again = await store(blob_container, "pod-b").read("0")
    assert again is not None
    assert (again.owner_id, again.epoch, again.sequence_number, again.offset) == (
        "pod-a",
        1,
        4,
        "40",
    )


async def test_keep_leaves_a_newer_owners_blob_alone(blob_container: Any) -> None:
    owner = store(blob_container, "pod-a")
    await owner.fence("0", 1)
    await owner.update("0", offset="40", sequence_number=4)
    newer = await store(blob_container, "pod-b").fence("0", 2)
    kept = await owner.keep("0")
    assert kept is not None
    assert (kept.owner_id, kept.epoch, kept.etag) == ("pod-b", 2, newer.etag)


async def test_a_worker_started_again_after_its_container_came_back_resumes_where_it_stood(
    blob_container: Any,
) -> None:
    hub = consumerfakes.FakeHub()
    hub.append("0", 3)
    recorder = consumerfakes.Recorder()
    owner = store(blob_container, "pod-a")

    async def latest(partition: str) -> Any:  # the start position "latest": the hub's end
        last = len(hub.events["0"]) - 1
        return checkpointing.Position(offset=str(last), sequence_number=last)

    first = worker(hub, owner, recorder, latest)
    task = asyncio.create_task(first.run())
    await consumerfakes.eventually(
        lambda: first.stats.checkpointed_sequence_number == 2, within=30, what="checkpoint 2"
    )
    await blob_container.delete_container()  # a Terraform re-apply, say
    hub.append("0", 1)  # handled, and its checkpoint refused
    async with asyncio.timeout(30):
        assert await task == "failed"
    assert isinstance(first.error, errors.ConfigurationError)
    assert "create it" in str(first.error)
    again = worker(hub, owner, recorder, latest)  # its restart, while the container is gone
    async with asyncio.timeout(30):
        assert await again.run() == "failed"
    hub.append("0", 2)  # enqueued while the partition waits
    await blob_container.create_container()
    third = worker(hub, owner, recorder, latest)
    task = asyncio.create_task(third.run())
    await consumerfakes.eventually(
        lambda: third.stats.checkpointed_sequence_number == 5, within=30, what="checkpoint 5"
    )
    third.release()
    async with asyncio.timeout(30):
        assert await task == "released"
    assert {("0", 4), ("0", 5)} <= set(recorder.done)  # not skipped by "latest"
    assert [s for _, s in recorder.done].count(3) == 2  # at least once: its checkpoint was lost


async def test_a_new_owner_of_a_partition_whose_blob_is_gone_says_so(
    blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=checkpointtakeovers.__name__)
    await store(blob_container, "pod-a").fence("0", 1)  # a first owner: nobody before it
    assert not caplog.records
    await delete_the_blob(blob_container)
    taken = await store(blob_container, "pod-b").fence("0", 2, start=startpositions.EARLIEST)
    assert taken.sequence_number == -1
    [record] = caplog.records
    message = record.getMessage()
    assert "partition 0" in message
    assert BLOB in message
    assert "epoch 2" in message
    assert "sequence number -1" in message
