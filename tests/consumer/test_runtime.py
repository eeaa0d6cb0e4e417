"""The runtime against in-memory fakes on fake loop time: the at-least-once rules, the
hand-off order, and every timer (retry and restart backoff, release and shutdown timeouts,
stuck detection, max_wait batching) checked in fake seconds."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Sequence

import pytest

from eventhub_balancer.consumer import (
    assignments,
    connections,
    contexts,
    partitions,
    processing,
    runtime,
)
from eventhub_balancer.contracts import partitionreports
from tests.consumer import policyfakes
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

FAST = partitions.BatchSettings(
    batch_size=10, max_wait=0.05, retry_backoff=0.01, retry_backoff_max=0.05, stuck_seconds=0.3
)


@contextlib.asynccontextmanager
async def running(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore | consumerfakes.FakeStoreHandle,
    recorder: processing.BatchProcessor,
    *,
    pod: str = "pod-a",
    batch: partitions.BatchSettings = FAST,
    shutdown_timeout: float = 2.0,
    backends: connections.BackendFactory | None = None,
    exits: list[str] | None = None,
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    handle = store.handle(pod) if isinstance(store, consumerfakes.FakeStore) else store
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders", pod=pod, batch=batch, shutdown_timeout=shutdown_timeout
        ),
        source=source,
        backends=backends or consumerfakes.fake_backends(hub, handle),
        processor=recorder,
        exit_process=(exits.append if exits is not None else _no_exit),
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


def _no_exit(reason: str) -> None:
    raise AssertionError(f"the runtime asked to exit: {reason}")


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
        # Failing to start is reported, not a reason to turn NotReady (deliverable 1).
        assert consumer.ready() == (True, "generation 1 applied; reported: 0 failing")
        await consumerfakes.eventually(lambda: "0" in source.reports, what="the report")
        report = source.reports["0"]
        assert (report.state, report.epoch, report.error) == ("failing", 1, "injected")
        await consumerfakes.eventually(
            lambda: len(recorder.done) == 3, what="the partition to start"
        )
        times = store.fence_times
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        # 1 s doubling (restarts.RESTART_BACKOFF_S), seen at the next reconcile tick.
        assert len(gaps) == 3
        for gap, delay in zip(gaps, (1.0, 2.0, 4.0), strict=True):
            assert delay <= gap <= delay + runtime.TICK_S + 0.01
        assert consumer.ready() == (True, "generation 1 applied")


async def test_a_failing_batch_is_reported_while_the_pod_stays_ready(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Deliverable 1: a retried batch is reported ``failing`` (attempts, first error line) and
    the pod stays Ready; the report is cleared once the batch succeeds."""
    fake_hub.append("0", 5)
    fake_hub.append("1", 5)
    recorder = policyfakes.PartitionRecorder(fail={"0": 3})
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, retry_backoff=2.0)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        await consumerfakes.eventually(lambda: "0" in source.reports, what="the report")
        report = source.reports["0"]
        assert (report.state, report.epoch) == ("failing", 1)
        assert report.error == "RuntimeError: handler failure (injected)"
        assert report.attempts >= 1
        assert consumer.ready() == (True, "generation 1 applied; reported: 0 failing")
        assert consumer.stats["0"].failing
        # The other partition is not held up.
        assert ("1", 4) in recorder.done
        await consumerfakes.eventually(lambda: ("0", 4) in recorder.done, within=30)
        await consumerfakes.eventually(lambda: not source.reports, what="the report cleared")
        assert consumer.ready() == (True, "generation 1 applied")
        assert fake_store.blobs["0"].sequence_number == 4
        assert not consumer.stats["0"].failing


async def test_a_handler_running_past_stuck_seconds_is_reported_stuck(
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
        assert source.reports == {}
        await asyncio.sleep(2)
        # Stuck is reported; the pod stays Ready for its other partitions.
        assert consumer.ready() == (True, "generation 1 applied; reported: 0 stuck")
        await consumerfakes.eventually(lambda: "0" in source.reports, within=1)
        assert source.reports["0"].state == "stuck"
        assert source.reports["0"].error == (
            "handler call running past the stuck limit of 120 s (attempt 1)"
        )
        await consumerfakes.eventually(lambda: not source.reports, within=100, what="cleared")
        assert now() - began == pytest.approx(200, abs=runtime.TICK_S + 0.1)
        assert len(recorder.done) == 5


async def test_the_stuck_gauge_rises_while_the_handler_call_still_hangs(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """``ehb_consumer_partition_stuck`` says what the report says, while the call hangs. It was
    set only when the call ended, so a handler hung for good read 0 on /metrics for ever."""
    from prometheus_client import generate_latest

    from eventhub_balancer.consumer import metrics

    fake_hub.append("0", 5)
    recorder = consumerfakes.Recorder()
    recorder.duration = 200.0
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, stuck_seconds=120)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        registry = metrics.registry_for(lambda: consumer.stats)

        def gauge() -> str:
            page = generate_latest(registry).decode()
            return next(line for line in page.splitlines() if "partition_stuck{" in line)

        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 1)
        assert gauge() == 'ehb_consumer_partition_stuck{partition="0"} 0.0'
        await consumerfakes.eventually(lambda: "0" in source.reports, within=125)
        await asyncio.sleep(runtime.TICK_S + 0.1)
        assert recorder.done == []  # the call still runs
        assert gauge() == 'ehb_consumer_partition_stuck{partition="0"} 1.0'
        await consumerfakes.eventually(lambda: len(recorder.done) == 5, within=100)
        assert gauge() == 'ehb_consumer_partition_stuck{partition="0"} 0.0'


async def test_a_handler_call_past_the_stuck_limit_is_said_once_in_the_log(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler hung for hours was reported to the operator and said nothing in the pod's
    log but an INFO line of ``-v``: ``kubectl logs`` showed a pod that had gone quiet."""
    fake_hub.append("0", 5)
    recorder = consumerfakes.Recorder()
    recorder.duration = 400.0
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, stuck_seconds=120)
    caplog.set_level("WARNING")
    async with running(fake_hub, fake_store, recorder, batch=batch) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 1)
        began = recorder.starts[0][0]
        await asyncio.sleep(began + 119 - now())
        assert [r for r in caplog.records if "stuck" in r.getMessage()] == []
        await asyncio.sleep(2)
        said = [r.getMessage() for r in caplog.records if "stuck" in r.getMessage()]
        assert said == [
            "partition 0: a handler call has run past the stuck limit of 120 s (attempt 1, "
            "--stuck-seconds): it is reported stuck; the pod stays Ready and goes on with its "
            "other partitions"
        ]
        await asyncio.sleep(200)
        assert len([r for r in caplog.records if "stuck" in r.getMessage()]) == 1


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


async def test_a_handler_that_returns_at_the_release_deadline_is_not_abandoned(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    # The call ends in the loop turn of the release deadline: it finished, so its batch is
    # checkpointed before the release is acknowledged, and the next owner repeats nothing.
    # (Found by tests/consumer/test_handoff_model.py: the timeout used to win the tie.)
    fake_hub.append("0", 4)
    recorder = consumerfakes.Recorder()
    recorder.duration = 25.0
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, release_timeout=20)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 1)
        [(started, _)] = recorder.starts
        await asyncio.sleep(started + 5.0 - now())
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))  # deadline: started + 25
        async with asyncio.timeout(30):
            await source.wait_for(generation=2, released={"0": 1})
    assert recorder.done == [("0", n) for n in range(4)]
    assert fake_store.blobs["0"].sequence_number == 3


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


async def test_shutdown_never_acknowledges_a_release_whose_final_checkpoint_is_not_durable(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """SIGTERM during a hand-off whose final checkpoint write hangs: the worker is cancelled
    at 90 % of the budget, and its release is not acknowledged, since the next owner would
    otherwise start at the old checkpoint and repeat events 0..4 as if they were new."""
    fake_hub.append("0", 5)
    recorder = consumerfakes.Recorder()
    store = fake_store.handle("pod-a")
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, checkpoint_interval=3600)
    async with running(fake_hub, store, recorder, batch=batch, shutdown_timeout=10) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 5, what="5 events")
        store.gate = asyncio.Event()  # Blob Storage slow: the final checkpoint hangs
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        await consumerfakes.eventually(lambda: store.updates_begun == 1, what="final write")
        asked = now()
        consumer.request_shutdown()
        await consumerfakes.eventually(lambda: consumer.stopped, within=15, what="the stop")
        assert now() - asked == pytest.approx(9.0, abs=0.1)
        assert fake_store.blobs["0"].sequence_number == -1
        assert source.released == {}
        assert source.applied_generation == 1


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


def policy(max_attempts: int, on_failure: str) -> dict[str, str]:
    return {"processing": json.dumps({"maxAttempts": max_attempts, "onFailure": on_failure})}


async def test_a_poison_batch_is_retried_with_backoff_then_parked(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Deliverable 1, ``park``: maxAttempts tries with doubling pauses, then the partition
    stops at its checkpoint and holds its epoch; it is reported, the pod stays Ready, the
    other partition goes on, and a revocation releases it without passing the batch."""
    fake_hub.append("0", 15)
    fake_hub.append("1", 5)
    recorder = policyfakes.PartitionRecorder(fail={"0": 10_000})
    batch = partitions.BatchSettings(
        batch_size=10, max_wait=0.05, retry_backoff=0.5, retry_backoff_max=1.5
    )
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        source.put(
            consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}, **policy(4, "park"))
        )
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked", what="parked"
        )
        tries = [
            at
            for (at, _), c in zip(recorder.starts, recorder.contexts, strict=True)
            if c.partition == "0"
        ]
        gaps = [later - earlier for earlier, later in itertools.pairwise(tries)]
        assert gaps == [pytest.approx(g, abs=0.01) for g in (0.5, 1.0, 1.5)]
        report = source.reports["0"]
        assert (report.epoch, report.attempts) == (1, 4)
        assert report.error == "RuntimeError: handler failure (injected)"
        assert source.applied_generation == 1
        assert consumer.ready() == (True, "generation 1 applied; reported: 0 parked")
        assert consumer.stats["0"].parked
        writes = source.writes
        await asyncio.sleep(30)
        # Parked: no more calls, no checkpoint, and no acknowledgement churn.
        assert sum(1 for c in recorder.contexts if c.partition == "0") == 4
        assert source.writes == writes
        assert fake_store.blobs["0"].sequence_number == -1
        assert fake_store.blobs["0"].epoch == 1
        assert sorted(recorder.done) == [("1", n) for n in range(5)]
        assert consumer.workers["0"].state == "running"
        source.put(
            consumerfakes.configmap(
                2, {"0": (1, "revoking"), "1": (1, "owned")}, **policy(4, "park")
            )
        )
        async with asyncio.timeout(5):
            await source.wait_for(generation=2, released={"0": 1})
        assert fake_store.blobs["0"].sequence_number == -1
        assert "0" not in source.reports
        assert not consumer.stats["0"].parked


async def test_retry_reports_are_written_at_most_once_per_tick(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    recorder = policyfakes.PartitionRecorder(fail={"0": 10_000})
    batch = partitions.BatchSettings(
        batch_size=10, max_wait=0.05, retry_backoff=0.01, retry_backoff_max=0.01
    )
    async with running(fake_hub, fake_store, recorder, batch=batch) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **policy(1000, "park")))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        writes = source.writes
        await asyncio.sleep(5)
        # Hundreds of attempts, each changing the report's count: at most one write a tick.
        assert recorder.calls > 200
        assert source.writes - writes <= 5 / runtime.TICK_S + 1
        assert source.reports["0"].state == "failing"


def dead_letter_backends(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> tuple[consumerfakes.FakeStoreHandle, policyfakes.FakeDeadLetters, policyfakes.Backends]:
    """pod-a's store handle, and backends with a dead-letter store that records its writes."""
    handle = fake_store.handle("pod-a")
    dead = policyfakes.FakeDeadLetters()
    return handle, dead, policyfakes.Backends({"orders": (fake_hub, handle)}, dead_letters=dead)


async def test_a_poison_batch_is_dead_lettered_durably_before_the_checkpoint_passes_it(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Deliverable 1, ``deadLetter``: after maxAttempts the batch is written to the dead-letter
    store (retried while that fails, the checkpoint held back), then checkpointed past."""
    fake_hub.append("0", 5)
    handle, dead, backends = dead_letter_backends(fake_hub, fake_store)
    dead.fail_writes = 2
    recorder = policyfakes.PartitionRecorder(fail={"0": 3})
    batch = partitions.BatchSettings(
        batch_size=10, max_wait=0.05, retry_backoff=1.0, retry_backoff_max=4.0
    )
    async with running(fake_hub, handle, recorder, batch=batch, backends=backends) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **policy(3, "deadLetter")))
        await consumerfakes.eventually(lambda: dead.attempts == 2, what="a failed dead letter")
        # Not durable yet: the checkpoint stays before the batch, the partition is failing.
        assert fake_store.blobs["0"].sequence_number == -1
        await consumerfakes.eventually(lambda: "0" in source.reports)
        assert source.reports["0"].state == "failing"
        assert source.reports["0"].error.startswith("dead-letter write failed")
        await consumerfakes.eventually(lambda: bool(dead.written), what="the dead letter")
        events, error, attempts, pod, epoch = dead.written["0/0-4"]
        assert events == [("0", n) for n in range(5)]
        assert (error, attempts, pod, epoch) == (
            "RuntimeError: handler failure (injected)\nsecond line of the error",
            3,
            "pod-a",
            1,
        )
        gaps = [b - a for a, b in itertools.pairwise(dead.write_times)]
        assert gaps == [pytest.approx(1.0, abs=0.01), pytest.approx(2.0, abs=0.01)]
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 4)
        assert consumer.stats["0"].dead_lettered_events == 5
        await consumerfakes.eventually(
            lambda: source.reports["0"].state is None, what="the trouble over"
        )
        # What the report keeps is the batch set aside, with the handler's error (not the
        # failed writes'), for the operator to tell (BatchDeadLettered).
        assert source.reports["0"].set_aside == partitionreports.SetAside(
            epoch=1, batches=1, name="0/0-4", error="RuntimeError: handler failure (injected)"
        )
        # The partition goes on after the dead-lettered batch.
        fake_hub.append("0", 3)
        await consumerfakes.eventually(lambda: len(recorder.done) == 3)
        assert recorder.done == [("0", 5), ("0", 6), ("0", 7)]
        assert consumer.ready() == (True, "generation 1 applied")


async def test_a_batch_of_one_event_is_logged_by_its_one_sequence_number(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A poison event alone in its batch was logged as ``sequence numbers 110-110``, in the
    failures and in the dead letter's line."""
    fake_hub.append("0", 1)
    handle, dead, backends = dead_letter_backends(fake_hub, fake_store)
    recorder = policyfakes.PartitionRecorder(fail={"0": 2})
    batch = partitions.BatchSettings(
        batch_size=10, max_wait=0.05, retry_backoff=0.5, retry_backoff_max=0.5
    )
    caplog.set_level(logging.WARNING, logger="eventhub_balancer.consumer.attempts")
    async with running(fake_hub, handle, recorder, batch=batch, backends=backends) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **policy(2, "deadLetter")))
        await consumerfakes.eventually(lambda: bool(dead.written), what="the dead letter")
    said = [r.getMessage() for r in caplog.records]
    assert [m.split(":")[1] for m in said] == [
        " handler failed on sequence number 0 (attempt 1 of 2)",
        " handler failed on sequence number 0 2 times (the most spec.processing.maxAttempts"
        " allows)",
        " dead-lettered sequence number 0 into 0/0-0",
    ]


async def test_a_parked_batch_is_dead_lettered_once_the_spec_says_deadletter(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """A user who switched spec.processing.onFailure from park to deadLetter, to set a parked
    poison batch aside, found it still parked: the policy applied from the next failure
    on, and a parked batch waited for its release only. It now goes to the dead-letter store
    and the partition goes on, with no restart; while the policy stays park, it waits."""
    fake_hub.append("0", 5)
    handle, dead, backends = dead_letter_backends(fake_hub, fake_store)
    recorder = policyfakes.PartitionRecorder(fail={"0": 2})
    batch = partitions.BatchSettings(
        batch_size=10, max_wait=0.05, retry_backoff=0.5, retry_backoff_max=0.5
    )
    async with running(fake_hub, handle, recorder, batch=batch, backends=backends) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **policy(2, "park")))
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked", what="parked"
        )
        # A change that keeps park (more attempts) leaves the batch parked.
        source.put(consumerfakes.configmap(2, {"0": (1, "owned")}, **policy(5, "park")))
        async with asyncio.timeout(5):
            await source.wait_for(generation=2)
        await asyncio.sleep(10)
        assert source.reports["0"].state == "parked"
        assert not dead.written
        assert recorder.calls == 2
        source.put(consumerfakes.configmap(3, {"0": (1, "owned")}, **policy(5, "deadLetter")))
        await consumerfakes.eventually(lambda: bool(dead.written), what="the dead letter")
        events, error, attempts, pod, epoch = dead.written["0/0-4"]
        assert events == [("0", n) for n in range(5)]
        assert (attempts, pod, epoch) == (2, "pod-a", 1)
        assert error.startswith("RuntimeError: handler failure (injected)")
        await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 4)
        await consumerfakes.eventually(
            lambda: source.reports["0"].state is None, what="the trouble over"
        )
        aside = source.reports["0"].set_aside
        assert aside is not None
        assert (aside.epoch, aside.batches) == (1, 1)
        assert not consumer.stats["0"].parked
        assert recorder.calls == 2  # set aside, not tried again
        fake_hub.append("0", 2)
        await consumerfakes.eventually(lambda: len(recorder.done) == 2)
        assert recorder.done == [("0", 5), ("0", 6)]


async def test_a_partition_lost_at_its_own_epoch_is_reported_and_restarted_on_a_newer_one(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Deliverable 3: lost is never silent; a higher epoch restarts it."""
    fake_hub.append("0", 3)
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 3)
        # Someone else took the checkpoint at a higher epoch than ours.
        await fake_store.handle("pod-b").fence("0", 2, start=None)
        fake_hub.append("0", 1)
        await consumerfakes.eventually(lambda: "0" in source.reports, what="the lost report")
        report = source.reports["0"]
        assert (report.state, report.epoch) == ("lost", 1)
        assert "0" not in consumer.workers
        assert source.applied_generation == 1
        assert consumer.ready() == (True, "generation 1 applied; reported: 0 lost")
        # The operator reassigns it at epoch + 1 (here: higher than the thief's).
        source.put(consumerfakes.configmap(2, {"0": (3, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=2)
        await consumerfakes.eventually(lambda: len(recorder.done) == 4, what="restarted")
        assert consumer.workers["0"].epoch == 3
        assert source.reports == {}
        assert fake_store.blobs["0"].epoch == 3


async def test_a_lost_partition_that_is_not_reported_does_not_count_as_applied() -> None:
    """The applied check itself: a wanted partition without a worker counts only when it is
    reported (here: lost at the epoch wanted)."""
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a"),
        source=source,
        backends=consumerfakes.fake_backends(
            consumerfakes.FakeHub(), consumerfakes.FakeStore().handle("pod-a")
        ),
        processor=consumerfakes.Recorder(),
    )
    consumer.latest = assignments.from_configmap(consumerfakes.configmap(1, {"0": (2, "owned")}))
    key = connections.Coordinates.of(consumer.latest)
    consumer.clients.key = key
    assert not consumer._applied({"0": 2}, key, {})
    consumer._lost["0"] = (2, "taken")
    reports = consumer.reports()
    assert reports["0"].state == "lost"
    assert consumer._applied({"0": 2}, key, reports)


async def test_a_change_of_coordinates_releases_into_the_old_store_then_starts_on_the_new(
    fake_store: consumerfakes.FakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Deliverable 4: every worker is released (final checkpoint into the old store) before
    the new clients open, and the new generation is acknowledged only once the partitions
    run on the new coordinates."""
    caplog.set_level("INFO")
    old_hub, new_hub = consumerfakes.FakeHub(), consumerfakes.FakeHub()
    new_store = consumerfakes.FakeStore()
    backends = policyfakes.Backends(
        {
            "orders": (old_hub, fake_store.handle("pod-a")),
            "payments": (new_hub, new_store.handle("pod-a")),
        }
    )
    old_hub.append("0", 12)
    old_hub.append("1", 12)
    new_hub.append("0", 2)
    new_hub.append("1", 2)
    recorder = consumerfakes.Recorder()
    batch = partitions.BatchSettings(batch_size=5, max_wait=0.05, checkpoint_interval=3600)
    async with running(old_hub, fake_store, recorder, batch=batch, backends=backends) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(recorder.done) == 24)
        recorder.block = asyncio.Event()
        old_hub.append("0", 1)
        await consumerfakes.eventually(lambda: recorder.calls == 7, what="a batch in flight")
        source.put(
            consumerfakes.configmap(
                2, {"0": (2, "owned"), "1": (2, "owned")}, eventHubName="payments"
            )
        )
        await asyncio.sleep(3)
        # The old partition 0 still finishes its batch: nothing opened on the new hub, the
        # new generation not acknowledged, and the pod not Ready for it.
        assert backends.log == [("open", "orders")]
        assert source.applied_generation == 1
        assert consumer.ready()[0] is False
        recorder.block.set()
        async with asyncio.timeout(5):
            await source.wait_for(generation=2)
        assert backends.log == [("open", "orders"), ("close", "orders"), ("open", "payments")]
        # Final checkpoints went into the old store.
        assert fake_store.blobs["0"].sequence_number == 12
        assert fake_store.blobs["1"].sequence_number == 11
        assert {p: b.epoch for p, b in new_store.blobs.items()} == {"0": 2, "1": 2}
        await consumerfakes.eventually(lambda: len(recorder.done) == 29)
        assert sorted(recorder.done[25:]) == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]
        assert consumer.ready() == (True, "generation 2 applied")
        assert source.released == {}
    # The old coordinates in words; the line showed the dataclass, Coordinates(...).
    (said,) = [
        r.getMessage() for r in caplog.records if "every partition released" in r.getMessage()
    ]
    assert said == (
        "every partition released from Event Hub 'orders' in local.servicebus.windows.net, "
        "consumer group '$Default', checkpoints in container 'checkpoints' (the Event Hub or "
        "checkpoint coordinates changed)"
    )


async def test_a_change_of_coordinates_at_the_same_epochs_still_moves(
    fake_store: consumerfakes.FakeStore,
) -> None:
    """Even when the operator kept the epochs, the pod never reads the old hub for the new
    generation."""
    old_hub, new_hub = consumerfakes.FakeHub(), consumerfakes.FakeHub()
    backends = policyfakes.Backends(
        {
            "orders": (old_hub, fake_store.handle("pod-a")),
            "payments": (new_hub, consumerfakes.FakeStore().handle("pod-a")),
        }
    )
    recorder = consumerfakes.Recorder()
    async with running(old_hub, fake_store, recorder, backends=backends) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        source.put(consumerfakes.configmap(2, {"0": (1, "owned")}, eventHubName="payments"))
        async with asyncio.timeout(5):
            await source.wait_for(generation=2)
        new_hub.append("0", 1)
        await consumerfakes.eventually(lambda: recorder.done == [("0", 0)])
        assert backends.log[-1] == ("open", "payments")
        assert [r.epoch for r in new_hub.receivers] == [1]
        assert source.released == {}


class Uncancellable:
    """A handler call that runs on through cancellation, as a sync handler's does: its thread
    cannot be stopped, and ``processing.run_in_thread`` ends the call only with the thread
    (tests/consumer/test_processing.py). Here on the loop, so that fake time runs free."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.cancelled = 0

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        self.started.set()
        while not self.finish.is_set():
            try:
                await self.finish.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
        raise asyncio.CancelledError()


async def test_a_handler_that_outlives_its_release_delays_the_ack_then_exits(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Deliverable 6: the release is not acknowledged while the handler runs; past the release
    timeout plus the exit bound the process is asked to exit."""
    fake_hub.append("0", 3)
    handler = Uncancellable()
    exits: list[str] = []
    batch = partitions.BatchSettings(
        batch_size=10, max_wait=0.05, release_timeout=20, handler_exit_timeout=5
    )
    async with running(fake_hub, fake_store, handler, batch=batch, exits=exits) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(handler.started.is_set, what="the handler")
        revoked = now()
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        await consumerfakes.eventually(lambda: bool(exits), within=40, what="the exit")
        assert now() - revoked == pytest.approx(25, abs=runtime.TICK_S + 0.1)
        assert handler.cancelled == 1
        assert "0" not in source.released
        assert consumer.workers["0"].handler_running
        assert exits[0].startswith("partition 0: the handler still runs 5 s past its release")
        await asyncio.sleep(60)
        assert "0" not in source.released  # never while the handler runs
        handler.finish.set()
        async with asyncio.timeout(5):
            await source.wait_for(generation=2, released={"0": 1})
        assert fake_store.blobs["0"].sequence_number == -1
    assert len(exits) == 1


async def test_shutdown_during_a_hand_off_never_acknowledges_while_the_handler_runs(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Revoked, then SIGTERM a second later, with the default timeouts: the worker waiting for
    its handler is cancelled at 90 % of the 25 s budget, and the release stays unacknowledged
    (the operator hands on at its timeout, at a higher epoch) while the process exits."""
    fake_hub.append("0", 3)
    handler = Uncancellable()
    exits: list[str] = []
    async with running(
        fake_hub,
        fake_store,
        handler,
        batch=partitions.BatchSettings(batch_size=10, max_wait=0.05),
        shutdown_timeout=25,
        exits=exits,
    ) as (consumer, source):
        try:
            source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
            await consumerfakes.eventually(handler.started.is_set, what="the handler")
            source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
            await asyncio.sleep(1)
            consumer.request_shutdown()
            await consumerfakes.eventually(lambda: consumer.stopped, within=30, what="the stop")
            assert exits == ["shutdown: the handler of partitions ['0'] still runs"]
            assert source.released == {}
        finally:
            handler.finish.set()  # else the call outlives the test, and its loop's teardown
    assert fake_store.blobs["0"].sequence_number == -1


@contextlib.asynccontextmanager
async def hung_on_partition_0(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource, list[str]]]:
    """A consumer with the default shutdown timeout (25 s) owning partitions 0 and 1, whose
    handler hangs on partition 0 and cannot be cancelled, once partition 1 has checkpointed
    its batch: the consumer, its assignment source and the exits it asked for."""
    fake_hub.append("0", 3)
    fake_hub.append("1", 3)
    hung = Uncancellable()

    async def handler(
        events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        if context.partition == "0":
            await hung(events, context)

    exits: list[str] = []
    async with running(
        fake_hub,
        fake_store,
        handler,
        batch=partitions.BatchSettings(batch_size=10, max_wait=0.05),
        shutdown_timeout=25,
        exits=exits,
    ) as (consumer, source):
        try:
            source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
            await consumerfakes.eventually(hung.started.is_set, what="the handler")
            await consumerfakes.eventually(lambda: fake_store.blobs["1"].sequence_number == 2)
            yield consumer, source, exits
        finally:
            hung.finish.set()


async def test_a_handler_hung_at_shutdown_leaves_the_other_releases_acknowledged(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """SIGTERM with the default timeouts (25 s, the exit bound 5 s) while partition 0's handler
    hangs: partition 1's release is acknowledged before the process exits. The hung call's own
    exit came at 60 % of 25 s plus 5 s, ahead of the drain's acknowledgement at 90 %: the pod
    exited with nothing acknowledged, and partition 1 waited for the operator's timeout."""
    async with hung_on_partition_0(fake_hub, fake_store) as (consumer, source, exits):
        stopping = now()
        consumer.request_shutdown()
        await consumerfakes.eventually(lambda: bool(exits), within=30, what="the exit")
        assert source.released == {"1": 1}
        assert exits == ["shutdown: the handler of partitions ['0'] still runs"]
        assert now() - stopping <= 25


async def test_a_shutdown_during_a_hand_off_exits_no_later_than_the_hand_off_would(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Partition 0 revoked with its handler hung, SIGTERM 10 s later: the process exits at the
    hand-off's own bound (release timeout plus exit bound, 25 s after the revocation, below
    ``handoffTimeoutSeconds``), with partition 1's release acknowledged first; the drain of
    the SIGTERM must not hold the exit back to 10 + 22.5 s, when the next owner may run."""
    async with hung_on_partition_0(fake_hub, fake_store) as (consumer, source, exits):
        revoked = now()
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking"), "1": (1, "owned")}))
        await asyncio.sleep(10)
        consumer.request_shutdown()
        await consumerfakes.eventually(lambda: bool(exits), within=30, what="the exit")
        assert now() - revoked <= 25 + runtime.TICK_S
        assert source.released == {"1": 1}


async def test_an_async_handler_is_cancelled_at_the_release_timeout_without_an_exit(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 3)
    recorder = consumerfakes.Recorder()
    recorder.block = asyncio.Event()
    exits: list[str] = []
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, release_timeout=20)
    async with running(fake_hub, fake_store, recorder, batch=batch, exits=exits) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 1)
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        async with asyncio.timeout(21):
            await source.wait_for(generation=2, released={"0": 1})
    assert exits == []
