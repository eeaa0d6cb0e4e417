"""A partition whose receive link fails while its last batch's checkpoint write is on the
wire: the worker lets that write finish before it ends, so its restart (at the same epoch,
from the checkpoint) hands no batch to the handler twice. The write was cancelled before:
every link drop the receiver could not mend (Event Hubs away for longer than its reopens, a
throttled link, a connection reset) repeated the last batch, in plain and Spark mode.

The wait is bounded: by its own limit (`checkpointwrites.SETTLE_WRITE_S`) for a write that hangs,
by the release timeout when the partition is revoked meanwhile, and by the shutdown timeout
on SIGTERM. A write that finds a higher epoch in the blob is refused as always: the worker
ends lost and writes nothing. A write that itself fails (the store away) still restarts the
worker from the checkpoint before it: that batch comes again, at-least-once.

On fake loop time (looptime) against the in-memory fakes of `tests.support.consumerfakes`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable

import pytest

from eventhub_balancer.consumer import checkpointwrites, partitions, processing
from tests.consumer.test_runtime import FAST, now, running
from tests.consumer.test_triggers import Handler, spark_triggers
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

#: How long the slow checkpoint write takes (fake seconds): within the store's budget.
WRITE_S = 3.0


class SlowStore(consumerfakes.FakeStoreHandle):
    """A store whose writes take ``write_s`` once told to, noting when each one landed."""

    def __init__(self, store: consumerfakes.FakeStore, owner: str) -> None:
        super().__init__(store, owner)
        self.write_s = 0.0
        self.slow_begun = 0
        self.landed: list[float] = []

    async def update(
        self, partition: str, *, offset: str, sequence_number: int
    ) -> consumerfakes.FakeCheckpoint:
        if self.write_s:
            self.slow_begun += 1
            await asyncio.sleep(self.write_s)
        written = await super().update(partition, offset=offset, sequence_number=sequence_number)
        self.landed.append(now())
        return written


Handled = Callable[[], list[int]]


def plain() -> tuple[processing.BatchProcessor, Handled]:
    recorder = consumerfakes.Recorder()
    return recorder, lambda: [n for _, n in recorder.done]


def spark() -> tuple[processing.BatchProcessor, Handled]:
    handler = Handler()
    return spark_triggers(handler), lambda: [n for _, rows in handler.triggers for _, n in rows]


def twice(handled: Handled) -> list[int]:
    return sorted(n for n, calls in collections.Counter(handled()).items() if calls > 1)


async def link_fails_mid_write(
    hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, store: SlowStore
) -> None:
    """Batch 0-4 checkpointed, batch 5-9 handled and its write on the wire; then the link
    fails for good (the receiver gave up reopening it)."""
    hub.append("0", 5)
    await consumerfakes.eventually(lambda: fake_store.history.get("0") == [4])
    store.write_s = WRITE_S
    hub.append("0", 5)
    await consumerfakes.eventually(lambda: store.slow_begun == 1, what="the write in flight")
    assert fake_store.history["0"] == [4]
    hub.fail("0")


@pytest.mark.parametrize("mode", [plain, spark], ids=["plain", "spark"])
async def test_a_link_failing_during_a_checkpoint_write_repeats_no_batch(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    mode: Callable[[], tuple[processing.BatchProcessor, Handled]],
) -> None:
    store = SlowStore(fake_store, "pod-a")
    processor, handled = mode()
    async with running(fake_hub, store, processor) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await link_fails_mid_write(fake_hub, fake_store, store)
        await consumerfakes.eventually(lambda: len(store.fence_times) == 2, within=30)
        assert fake_store.history["0"] == [4, 9], "the write in flight was cancelled"
        assert store.fence_times[1] >= store.landed[-1], "restarted before the write landed"
        store.write_s = 0.0
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: fake_store.history["0"][-1] == 14, within=30)
        assert twice(handled) == []
        assert sorted(handled()) == list(range(15))


async def test_a_checkpoint_write_that_hangs_holds_the_restart_only_so_long(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = SlowStore(fake_store, "pod-a")
    recorder, handled = plain()
    async with running(fake_hub, store, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await link_fails_mid_write(fake_hub, fake_store, store)
        failed = now()
        store.gate = asyncio.Event()  # the store never answers this write
        store.write_s = 0.0
        await consumerfakes.eventually(lambda: len(store.fence_times) == 2, within=120)
        # Given up after the bound, then restarted after the first backoff (1 s).
        waited = store.fence_times[1] - failed
        assert checkpointwrites.SETTLE_WRITE_S <= waited <= checkpointwrites.SETTLE_WRITE_S + 2
        store.gate = None
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: fake_store.history["0"][-1] == 14, within=30)
        # The cancelled write repeats its batch, once: at-least-once, nothing lost.
        assert twice(handled) == [5, 6, 7, 8, 9]
        assert sorted(set(handled())) == list(range(15))


async def test_a_revocation_is_not_held_past_its_timeout_by_the_write(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = SlowStore(fake_store, "pod-a")
    recorder, _ = plain()
    release_s = 2.0
    batch = partitions.BatchSettings(
        batch_size=FAST.batch_size, max_wait=FAST.max_wait, release_timeout=release_s
    )
    async with running(fake_hub, store, recorder, batch=batch) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await link_fails_mid_write(fake_hub, fake_store, store)
        store.gate = asyncio.Event()  # the write hangs
        await asyncio.sleep(0.5)
        revoked = now()
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        async with asyncio.timeout(release_s + 1):
            await source.wait_for(generation=2)
        await consumerfakes.eventually(lambda: source.released == {"0": 1}, within=5)
        assert now() - revoked <= release_s + 1
        assert fake_store.history["0"] == [4]


async def test_a_shutdown_is_not_held_past_its_timeout_by_the_write(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = SlowStore(fake_store, "pod-a")
    recorder, _ = plain()
    shutdown_s = 4.0
    async with running(fake_hub, store, recorder, shutdown_timeout=shutdown_s) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await link_fails_mid_write(fake_hub, fake_store, store)
        store.gate = asyncio.Event()  # the write hangs
        await asyncio.sleep(0.5)
        stopping = now()
        consumer.request_shutdown()
        await consumerfakes.eventually(lambda: not consumer.workers, within=shutdown_s)
        assert now() - stopping <= shutdown_s * 0.9
        assert fake_store.history["0"] == [4]


async def test_a_write_that_finds_a_higher_epoch_is_refused_and_the_partition_lost(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    store = SlowStore(fake_store, "pod-a")
    recorder, _ = plain()
    async with running(fake_hub, store, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await link_fails_mid_write(fake_hub, fake_store, store)
        # Meanwhile a newer owner fenced the blob at epoch 2.
        await fake_store.handle("pod-b").fence("0", 2, start=None)
        await consumerfakes.eventually(lambda: "0" in source.reports, within=30)
        assert source.reports["0"].state == "lost"
        assert fake_store.history["0"] == [4]
        assert fake_store.blobs["0"].epoch == 2
        assert fake_store.blobs["0"].sequence_number == 4
        assert len(store.fence_times) == 1, "restarted at the epoch it lost"
    # The loss is said with the failure that ended the worker (said with its restart only
    # when it restarts).
    stopped = [r.getMessage() for r in caplog.records if "; stopped, after" in r.getMessage()]
    assert len(stopped) == 1
    assert stopped[0].endswith("; stopped, after the failure: partition 0: injected")


async def test_a_checkpoint_write_that_fails_repeats_its_batch_once(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The converse: the link is fine and the write fails (the store away past its budget).
    The worker restarts from the checkpoint before that write: its batch comes again, once."""
    store = SlowStore(fake_store, "pod-a")
    recorder, handled = plain()
    async with running(fake_hub, store, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: fake_store.history.get("0") == [4])
        store.fail_updates = 1
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: len(store.fence_times) == 2, within=30)
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: fake_store.history["0"][-1] == 14, within=30)
        assert twice(handled) == [5, 6, 7, 8, 9]
        assert sorted(set(handled())) == list(range(15))
