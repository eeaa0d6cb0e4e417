"""A pod asked to let go (SIGTERM, or a revocation) of partitions that are failing and wait
for their paced restart: their release is acknowledged at once, with the others'.

Such a partition holds no link and its worker wrote nothing since its last durable checkpoint
(a checkpoint write that failed leaves its batch to the next owner: at least once, as after
any failure). Before, SIGTERM acknowledged only the partitions it had running: a terminating
pod that stays listed (a sidecar, a hook, a slow kubelet) kept each failing one from its next
owner for 2 s plus ``handoffTimeoutSeconds`` (30 s), in the very outage a rollout may be
fixing. What is still in flight is never acknowledged: a restart attempt the shutdown had to
cut short may have its fence write on the wire.

On fake loop time (looptime) against the in-memory fakes of `tests.support.consumerfakes`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from eventhub_balancer import errors
from eventhub_balancer.consumer import assignments, connections, runtime
from tests.consumer.test_outage_reports import DownStore
from tests.consumer.test_runtime import now, running
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

SHUTDOWN_S = 10.0


async def _failing_in_backoff(
    consumer: runtime.Runtime, source: assignments.MemorySource, partition: str
) -> None:
    """Until ``partition`` is reported failing and no worker runs it (its restart waits)."""
    await consumerfakes.eventually(
        lambda: partition in source.reports and partition not in consumer.workers,
        within=60,
        what=f"partition {partition} failing, waiting for its restart",
    )
    assert source.reports[partition].state == "failing"


async def test_sigterm_releases_a_partition_waiting_for_its_restart_with_the_others(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = fake_store.handle("pod-a")
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, store, recorder, shutdown_timeout=SHUTDOWN_S) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"1": (1, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        store.fail_fences = 1_000  # the store refuses every fence from now on
        source.put(consumerfakes.configmap(2, {"0": (1, "owned"), "1": (1, "owned")}))
        await _failing_in_backoff(consumer, source, "0")

        shutdown = now()
        consumer.request_shutdown()
        async with asyncio.timeout(SHUTDOWN_S):
            await source.wait_for(released={"0": 1, "1": 1})
        assert now() - shutdown <= runtime.TICK_S
        await consumerfakes.eventually(lambda: consumer.stopped, what="the shutdown")
        assert source.released == {"0": 1, "1": 1}


async def test_sigterm_releases_the_partitions_of_clients_that_cannot_open(
    fake_hub: consumerfakes.FakeHub,
) -> None:
    """A bad key or an unreachable namespace: no worker ever ran, every partition fails."""

    @contextlib.asynccontextmanager
    async def refused(assignment: assignments.Assignment) -> AsyncIterator[connections.Backend]:
        raise errors.EventHubUnreachable("cannot open: injected")
        yield  # pragma: no cover

    recorder = consumerfakes.Recorder()
    store = consumerfakes.FakeStore()
    async with running(
        fake_hub, store, recorder, backends=refused, shutdown_timeout=SHUTDOWN_S
    ) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (3, "owned"), "1": (3, "owned")}))
        await consumerfakes.eventually(lambda: sorted(source.reports) == ["0", "1"])
        consumer.request_shutdown()
        async with asyncio.timeout(1):
            await source.wait_for(released={"0": 3, "1": 3})
    assert recorder.calls == 0


async def test_sigterm_releases_a_partition_whose_checkpoint_write_failed(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Its last batch was handled, its checkpoint not written: the next owner repeats it, as it
    would have after the hand-off timeout, only sooner."""
    store = DownStore(fake_store, "pod-a")
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, store, recorder, shutdown_timeout=SHUTDOWN_S) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: fake_store.history.get("0") == [4])
        store.down = True
        fake_hub.append("0", 5)  # handled; its checkpoint write fails after the budget
        await _failing_in_backoff(consumer, source, "0")
        consumer.request_shutdown()
        async with asyncio.timeout(1):
            await source.wait_for(released={"0": 1})
    assert fake_store.blobs["0"].sequence_number == 4  # the next owner starts after 4


async def test_sigterm_does_not_release_a_restart_attempt_it_cut_short(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """A restart attempt's fence still on the wire when the shutdown runs out is in flight:
    that partition is left to the hand-off timeout, as any release the pod had to cancel."""
    store = DownStore(fake_store, "pod-a")
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, store, recorder, shutdown_timeout=SHUTDOWN_S) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        async with asyncio.timeout(5):
            await source.wait_for(generation=1)
        store.down = True  # every fence now hangs 20 s (longer than the shutdown) and fails
        source.put(consumerfakes.configmap(2, {"0": (2, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: "0" in consumer.workers, what="the new epoch")
        await consumerfakes.eventually(
            lambda: "0" in source.reports and "0" in consumer.workers,
            within=60,
            what="partition 0 failing, a restart attempt in flight",
        )
        consumer.request_shutdown()
        await consumerfakes.eventually(lambda: consumer.stopped, within=SHUTDOWN_S)
        assert source.released == {"1": 1}


async def test_a_revocation_releases_a_partition_waiting_for_its_restart_at_once(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = fake_store.handle("pod-a")
    store.fail_fences = 1_000
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await _failing_in_backoff(consumer, source, "0")
        revoked = now()
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        async with asyncio.timeout(5):
            await source.wait_for(released={"0": 1})
        assert now() - revoked <= runtime.TICK_S
        assert "0" not in consumer.workers
