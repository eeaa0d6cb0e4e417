"""The runtime against in-memory fakes on fake loop time: the at-least-once rules, the
hand-off order, and every timer (retry and restart backoff, release and shutdown timeouts,
stuck detection, max_wait batching) checked in fake seconds."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import pytest

from eventhub_balancer.consumer import assignments, partitions, runtime
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

FAST = partitions.BatchSettings(
    batch_size=10, max_wait=0.05, retry_backoff=0.01, retry_backoff_max=0.05, stuck_seconds=0.3
)


@contextlib.asynccontextmanager
async def running(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore | consumerfakes.FakeStoreHandle,
    recorder: consumerfakes.Recorder,
    *,
    pod: str = "pod-a",
    batch: partitions.BatchSettings = FAST,
    shutdown_timeout: float = 2.0,
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    handle = store.handle(pod) if isinstance(store, consumerfakes.FakeStore) else store
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders", pod=pod, batch=batch, shutdown_timeout=shutdown_timeout
        ),
        source=source,
        backends=consumerfakes.fake_backends(hub, handle),
        processor=recorder,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        if handle.gate is not None:
            handle.gate.set()
        consumer.request_shutdown()
        async with asyncio.timeout(shutdown_timeout + 5):
            await task


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_processes_every_event_and_checkpoints_after_the_handler(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 35)
    fake_hub.append("1", 7)
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 42, what="all events")
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 34)
        assert consumer.ready() == (True, "generation 1 applied")
        # Batches of at most 10, in order; a checkpoint after each one.
        assert sorted(recorder.done) == [("0", n) for n in range(35)] + [("1", n) for n in range(7)]
        assert fake_store.history["0"] == [9, 19, 29, 34]
        first = recorder.contexts[0]
        assert (first.consumer, first.pod, first.epoch, first.attempt) == ("orders", "pod-a", 1, 1)
        assert consumer.stats["0"].lag() == 0


async def test_a_batch_closes_max_wait_after_its_first_event(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    batch = partitions.BatchSettings(batch_size=100, max_wait=1.0)
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, fake_store, recorder, batch=batch) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        # A slow stream: one event every 0.3 s, from t0 on.
        t0 = now()
        for _ in range(8):
            fake_hub.append("0", 1)
            await asyncio.sleep(0.3)
        await consumerfakes.eventually(lambda: len(recorder.done) == 8)
        # Events at +0, +0.3, +0.6, +0.9 make the first batch, handed over at +1.0; the next
        # one starts with the event at +1.2 and closes at +2.2.
        assert [size for _, size in recorder.starts] == [4, 4]
        assert [at - t0 for at, _ in recorder.starts] == [
            pytest.approx(1.0, abs=0.01),
            pytest.approx(2.2, abs=0.01),
        ]
        # A full batch does not wait.
        fake_hub.append("0", 250)
        sent = now()
        await consumerfakes.eventually(lambda: len(recorder.done) == 258)
        assert [size for _, size in recorder.starts[2:]] == [100, 100, 50]
        assert recorder.starts[2][0] == pytest.approx(sent, abs=0.01)
        assert recorder.starts[3][0] == pytest.approx(sent, abs=0.01)


async def test_revocation_finishes_the_batch_checkpoints_then_acknowledges(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 25)
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 25)
        recorder.block = asyncio.Event()
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: recorder.calls == 4, what="the in-flight batch")
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        await asyncio.sleep(5)
        # The batch is still in the handler: no release yet, no checkpoint past it.
        assert "0" not in source.released
        assert fake_store.blobs["0"].sequence_number == 24
        assert consumer.workers["0"].state == "running"
        recorder.block.set()
        async with asyncio.timeout(5):
            await source.wait_for(generation=2, released={"0": 1})
        assert fake_store.blobs["0"].sequence_number == 29
        assert consumer.owned() == {}

    # The next owner starts right after the final checkpoint: no duplicate.
    successor = consumerfakes.Recorder()
    fake_hub.append("0", 3)
    async with running(fake_hub, fake_store, successor, pod="pod-b") as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (2, "owned")}))
        await consumerfakes.eventually(lambda: len(successor.done) == 3)
    assert successor.done == [("0", 30), ("0", 31), ("0", 32)]


async def test_a_release_of_a_partition_it_does_not_run_is_acknowledged_at_once(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """After a restart, or once its worker was lost: nothing to finish, no timeout to wait."""
    fake_hub.append("1", 3)
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (4, "revoking"), "1": (2, "owned")}))
        async with asyncio.timeout(1):
            await source.wait_for(generation=1, released={"0": 4})
        await consumerfakes.eventually(lambda: len(recorder.done) == 3)
        # Partition 1 is lost to a newer owner, then revoked: acknowledged without a worker.
        await fake_store.handle("pod-b").fence("1", 3, start=None)
        fake_hub.append("1", 1)
        await consumerfakes.eventually(
            lambda: "1" not in consumer.workers, what="the lost worker to stop"
        )
        source.put(consumerfakes.configmap(2, {"1": (2, "revoking")}))
        async with asyncio.timeout(1):
            await source.wait_for(generation=2, released={"1": 2})
        assert consumer.ready() == (True, "generation 2 applied")


async def test_handler_errors_are_retried_with_backoff_and_never_checkpointed_past(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 10)
    recorder = consumerfakes.Recorder()
    recorder.fail_next = 4
    batch = partitions.BatchSettings(
        batch_size=10, max_wait=0.05, retry_backoff=0.5, retry_backoff_max=1.5
    )
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 10)
        assert recorder.calls == 5
        assert [c.attempt for c in recorder.contexts] == [1, 2, 3, 4, 5]
        assert consumer.stats["0"].handler_errors == 4
        # 0.5 s doubling, capped at 1.5 s.
        starts = [at for at, _ in recorder.starts]
        gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
        assert gaps == [pytest.approx(g, abs=0.01) for g in (0.5, 1.0, 1.5, 1.5)]
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 9)
        assert fake_store.history["0"] == [9]


async def test_a_failing_partition_is_restarted_with_backoff(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 3)
    store = fake_store.handle("pod-a")
    store.fail_fences = 3
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(
            lambda: len(store.fence_times) == 2, what="the first restart"
        )
        assert consumer.ready() == (False, "partitions failing to start: ['0']")
        await consumerfakes.eventually(
            lambda: len(recorder.done) == 3, what="the partition to start"
        )
        times = store.fence_times
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        # 1 s doubling (runtime.RESTART_BACKOFF_S), seen at the next reconcile tick.
        assert len(gaps) == 3
        for gap, delay in zip(gaps, (1.0, 2.0, 4.0), strict=True):
            assert delay <= gap <= delay + runtime.TICK_S + 0.01
        assert consumer.ready() == (True, "generation 1 applied")


async def test_a_stuck_partition_turns_the_pod_not_ready_until_it_recovers(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    recorder = consumerfakes.Recorder()
    recorder.fail_next = 10_000
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        await consumerfakes.eventually(lambda: not consumer.ready()[0], what="NotReady")
        assert "stuck" in consumer.ready()[1]
        # The metric follows at the next failed attempt (readiness looks at the clock).
        await consumerfakes.eventually(lambda: consumer.stats["0"].stuck, what="the stuck metric")
        assert fake_store.history.get("0") is None
        recorder.fail_next = 0
        await consumerfakes.eventually(lambda: consumer.ready()[0], what="Ready again")
        assert fake_store.blobs["0"].sequence_number == 4
        assert not consumer.stats["0"].stuck


async def test_a_handler_running_past_stuck_seconds_turns_the_pod_not_ready(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    recorder = consumerfakes.Recorder()
    recorder.duration = 200.0
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, stuck_seconds=120)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 1)
        began = recorder.starts[0][0]
        await asyncio.sleep(began + 119 - now())
        assert consumer.ready() == (True, "generation 1 applied")
        await asyncio.sleep(2)
        assert consumer.ready() == (False, "partitions stuck beyond 120 s: ['0']")
        await consumerfakes.eventually(lambda: consumer.ready()[0], within=100, what="Ready again")
        assert now() - began == pytest.approx(200, abs=0.1)
        assert len(recorder.done) == 5


async def test_ownership_lost_stops_the_partition_without_a_checkpoint(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 10)
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 10)
        recorder.block = asyncio.Event()
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: recorder.calls == 2)
        worker = consumer.workers["0"]
        # A newer owner fences the checkpoint while our batch is in the handler.
        thief = fake_store.handle("pod-b")
        await thief.fence("0", 2, start=None)
        recorder.block.set()
        await consumerfakes.eventually(
            lambda: "0" not in consumer.workers, what="the worker to stop"
        )
        assert worker.path == ["fencing", "running", "lost"]
        assert fake_store.blobs["0"].epoch == 2
        assert fake_store.blobs["0"].sequence_number == 9
        assert fake_store.history["0"] == [9]
        await asyncio.sleep(10)  # restarts would have happened by now
        assert "0" not in consumer.workers, "restarted a partition it lost at the same epoch"
        assert "0" not in source.released


async def test_a_stolen_link_stops_the_partition_at_once(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 3)
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 3)
        stolen = now()
        fake_hub.claim("0", 2)
        fake_hub.append("0", 3)
        await consumerfakes.eventually(lambda: "0" not in consumer.workers)
        assert now() - stolen < 0.1
        assert len(recorder.done) == 3
        assert fake_store.blobs["0"].sequence_number == 2


async def test_shutdown_releases_every_partition_with_a_final_checkpoint(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 12)
    fake_hub.append("1", 12)
    recorder = consumerfakes.Recorder()
    batch = partitions.BatchSettings(batch_size=5, max_wait=0.05, checkpoint_interval=3600)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (3, "owned"), "1": (4, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 24)
        # With a long checkpoint interval nothing was checkpointed so far.
        assert fake_store.blobs["0"].sequence_number == -1
    assert source.released == {"0": 3, "1": 4}
    assert fake_store.blobs["0"].sequence_number == 11
    assert fake_store.blobs["1"].sequence_number == 11
    assert consumer.stopped


async def test_a_handler_that_never_returns_is_abandoned_after_the_release_timeout(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 4)
    recorder = consumerfakes.Recorder()
    recorder.block = asyncio.Event()  # never set
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, release_timeout=20)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 1)
        revoked = now()
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        async with asyncio.timeout(30):
            await source.wait_for(generation=2, released={"0": 1})
        assert 20 <= now() - revoked <= 20 + runtime.TICK_S + 0.01
    # Nothing finished, so the checkpoint stays where it was: the next owner redoes the batch.
    assert fake_store.blobs["0"].sequence_number == -1
    assert recorder.done == []


async def test_shutdown_abandons_a_handler_that_never_returns_within_its_budget(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 4)
    fake_hub.append("1", 4)
    recorder = consumerfakes.Recorder()
    recorder.block = asyncio.Event()  # never set
    async with running(fake_hub, fake_store, recorder, shutdown_timeout=10) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (2, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 2)
        asked = now()
    # 60 % of the budget for the in-flight batches, then the release acknowledgement.
    assert now() - asked == pytest.approx(6.0, abs=0.1)
    assert source.released == {"0": 1, "1": 2}
    assert fake_store.blobs["0"].sequence_number == -1
    assert consumer.stopped


async def test_the_next_handler_waits_for_the_previous_checkpoint(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The crash bound: with a checkpoint write in flight, the next batch is received but not
    handed to the handler, so a SIGKILL can repeat at most one batch."""
    fake_hub.append("0", 30)
    recorder = consumerfakes.Recorder()
    store = fake_store.handle("pod-a")
    store.gate = asyncio.Event()
    async with running(fake_hub, store, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(
            lambda: store.updates_begun == 1, what="the first checkpoint write"
        )
        receiver = fake_hub.receivers[0]
        await consumerfakes.eventually(
            lambda: receiver.handed_out > 9, what="the next batch received"
        )
        await asyncio.sleep(5)  # time enough for a second handler call, were it allowed
        assert recorder.calls == 1
        assert recorder.done == [("0", n) for n in range(10)]
        store.gate.set()
        await consumerfakes.eventually(lambda: len(recorder.done) == 30, what="the rest")
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 29)
        assert fake_store.history["0"] == [9, 19, 29]


async def test_an_idle_partition_stops_when_its_last_checkpoint_write_finds_a_new_owner(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    recorder = consumerfakes.Recorder()
    store = fake_store.handle("pod-a")
    store.gate = asyncio.Event()
    async with running(fake_hub, store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(
            lambda: store.updates_begun == 1, what="the checkpoint write"
        )
        # A newer owner fences while our write is on the wire; no event follows.
        await fake_store.handle("pod-b").fence("0", 2, start=None)
        store.gate.set()
        await consumerfakes.eventually(
            lambda: "0" not in consumer.workers, what="the worker to stop"
        )
        assert fake_store.blobs["0"].epoch == 2
        assert fake_store.blobs["0"].sequence_number == -1
        assert "0" not in source.released
