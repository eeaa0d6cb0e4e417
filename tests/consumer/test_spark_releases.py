"""Spark mode's releases on fake time, inside the runtime: a revoked partition's batch that no
running trigger holds is withdrawn, unprocessed, as soon as the release starts, whether it
waits behind another partition's trigger or, with its trigger, for a SparkSession that is
starting again (the fakes of `tests.consumer.test_triggers` and
`tests.consumer.test_session_keeping`: no JVM, no thread).

Either way a planned move makes no duplicate: what the handler processed is checkpointed, and
what it did not is left to the next owner.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from eventhub_balancer.consumer import (
    assignments,
    partitions,
    processing,
    runtime,
    sessionkeeping,
)
from tests.consumer.test_session_keeping import DyingSession, Factory, triggers_on
from tests.consumer.test_triggers import Handler, SteppedExecutor, spark_triggers
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

RELEASE_S = 3.0
EXIT_S = 5.0


@contextlib.asynccontextmanager
async def spark_runtime(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore,
    processor: processing.BatchProcessor,
    exits: list[str],
    keeper: sessionkeeping.SessionKeeper | None = None,
) -> AsyncIterator[assignments.MemorySource]:
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders",
            pod="pod-a",
            batch=partitions.BatchSettings(
                batch_size=10,
                max_wait=0.05,
                release_timeout=RELEASE_S,
                handler_exit_timeout=EXIT_S,
            ),
            shutdown_timeout=2.0,
        ),
        source=source,
        backends=consumerfakes.fake_backends(hub, store.handle("pod-a")),
        processor=processor,
        readiness=None if keeper is None else keeper.ready,
        exit_process=exits.append,
    )
    if keeper is not None:
        keeper.start()
    task = asyncio.create_task(consumer.run())
    try:
        yield source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(30):
            await task


def rows_of(handler: Handler, partition: str) -> list[int]:
    return [n for _, rows in handler.triggers for p, n in rows if p == partition]


async def test_a_release_withdraws_its_batch_queued_behind_another_partitions_trigger(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The release waits for no trigger that does not hold its batch: before, the next
    trigger took the revoked partition's batch, ran past the release's deadline, and the
    release was acknowledged at the checkpoint before it: the next owner ran it again."""
    handler, exits = Handler(), list[str]()
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(handler, executor=executor)
    fake_hub.append("1", 5)
    async with spark_runtime(fake_hub, fake_store, spark, exits) as source:
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        await consumerfakes.eventually(lambda: bool(executor.waiting), what="partition 1's trigger")
        fake_hub.append("0", 5)  # its batch queues behind the running trigger
        await asyncio.sleep(0.5)
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking"), "1": (1, "owned")}))
        try:
            # Acknowledged while the trigger of partition 1 still runs, far before the deadline.
            async with asyncio.timeout(RELEASE_S / 3):
                await source.wait_for(generation=2, released={"0": 1})
            assert len(executor.waiting) == 1
            assert fake_store.blobs["0"].sequence_number == -1
        finally:
            executor.hold = False  # the held trigger ends: so does the test, passed or not
            while executor.waiting:
                executor.step()
        await consumerfakes.eventually(
            lambda: fake_store.blobs["1"].sequence_number == 4, what="partition 1's checkpoint"
        )
        await asyncio.sleep(1.0)
    # Partition 0's events never reached the handler here: the next owner processes them once.
    assert rows_of(handler, "0") == []
    assert rows_of(handler, "1") == [0, 1, 2, 3, 4]
    assert exits == []


class RestartingFactory(Factory):
    """Sessions that take ``start_s[n]`` fake seconds to start, the n-th one."""

    def __init__(self, *start_s: float) -> None:
        super().__init__()
        self.start_s = start_s

    async def build(self) -> DyingSession:
        await asyncio.sleep(self.start_s[len(self.built)])
        session = DyingSession(len(self.built) + 1)
        self.built.append(session)
        return session


@pytest.mark.parametrize(
    "restart_s",
    [12.0, RELEASE_S + EXIT_S - 2.0],
    ids=["back-after-the-exit-bound", "back-between-deadline-and-exit-bound"],
)
async def test_a_release_during_a_session_restart_withdraws_the_batch_waiting_for_it(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, restart_s: float
) -> None:
    """Before, the trigger after the loss held the batch while it waited for the new session:
    the release's cancellation waited too, and either the pod exited as hung (status 70) or
    the new session ran the revoked partition's batch past its deadline, unrecorded."""
    factory, handler, exits = RestartingFactory(1.0, restart_s), Handler(), list[str]()
    keeper = factory.keeper()
    spark = triggers_on(keeper, handler)
    fake_hub.append("0", 5)
    async with spark_runtime(fake_hub, fake_store, spark, exits, keeper) as source:
        await consumerfakes.eventually(lambda: keeper.ready()[0], what="the session")
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(
            lambda: "0" in fake_store.blobs and fake_store.blobs["0"].sequence_number == 4,
            what="the first checkpoint",
        )
        factory.built[0].dead = True
        fake_hub.append("0", 5)  # 5-9: their trigger fails, a new session starts
        await consumerfakes.eventually(lambda: not keeper.ready()[0], what="the session lost")
        await asyncio.sleep(0.5)
        loop = asyncio.get_running_loop()
        revoked_at = loop.time()
        source.put(consumerfakes.configmap(2, {"0": (1, "revoking")}))
        async with asyncio.timeout(RELEASE_S + EXIT_S + restart_s):
            await source.wait_for(generation=2, released={"0": 1})
        released_after = loop.time() - revoked_at
        await asyncio.sleep(restart_s + EXIT_S)  # the new session comes, and would run it
    assert released_after < 1.0
    assert fake_store.blobs["0"].sequence_number == 4
    assert rows_of(handler, "0") == [0, 1, 2, 3, 4]  # 5-9 withdrawn, for the next owner
    assert exits == []
