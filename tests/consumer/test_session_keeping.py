"""Spark mode's readiness on fake time: a pod is Ready only once its SparkSession is started
and warmed, and NotReady again while a lost session is replaced (`sessionkeeping`).

The session factory is a fake that takes 12 fake seconds, as a session and its warm-up take
on a loaded two-core machine; the handler is `tests.consumer.test_triggers.Handler` on a
session that the test can declare dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer.consumer import (
    assignments,
    contexts,
    partitions,
    runtime,
    sessionkeeping,
    triggers,
)
from tests.consumer.test_triggers import (
    FakeSession,
    Handler,
    SteppedExecutor,
    batch,
    released_call,
)
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

START_S = 12.0


class DyingSession(FakeSession):
    """A fake session that can die: its DataFrames fail, as a dead JVM's calls do."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.dead = False
        #: Alive, but its jobs wait for good: it answers its liveness check no.
        self.cannot_process = False

    def createDataFrame(self, table: Any, schema: Any = None) -> Any:
        if self.dead:
            raise ConnectionError("Answer from Java side is empty")
        return table


class Factory:
    """Builds `DyingSession`s, each taking `START_S` of the loop's (fake) time."""

    def __init__(self) -> None:
        self.built: list[DyingSession] = []
        self.discarded: list[DyingSession] = []

    async def build(self) -> DyingSession:
        await asyncio.sleep(START_S)
        session = DyingSession(len(self.built) + 1)
        self.built.append(session)
        return session

    async def alive(self, session: DyingSession) -> bool:
        return not session.dead and not session.cannot_process

    async def discard(self, session: DyingSession) -> None:
        self.discarded.append(session)

    def keeper(self) -> sessionkeeping.SessionKeeper:
        return sessionkeeping.SessionKeeper(self.build, alive=self.alive, discard=self.discard)


def triggers_on(keeper: sessionkeeping.SessionKeeper, handler: Handler) -> triggers.SparkTriggers:
    """The Spark trigger loop of pod-a, on ``keeper``'s sessions, stepped by the test."""
    return triggers.SparkTriggers(
        handler,
        session=keeper.get,
        consumer="orders",
        pod="pod-a",
        executor=SteppedExecutor(),
        session_lost=keeper.lost,
    )


@contextlib.asynccontextmanager
async def spark_pod(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore,
    keeper: sessionkeeping.SessionKeeper,
    handler: Handler,
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    source = assignments.MemorySource()
    processor = triggers_on(keeper, handler)
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders",
            pod="pod-a",
            batch=partitions.BatchSettings(batch_size=10, max_wait=0.05, release_timeout=20),
            shutdown_timeout=2.0,
        ),
        source=source,
        backends=consumerfakes.fake_backends(hub, store.handle("pod-a")),
        processor=processor,
        readiness=keeper.ready,
    )
    keeper.start()
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(10):
            await task


def sequences(handler: Handler, partition: str) -> list[int]:
    return [n for _, rows in handler.triggers for p, n in rows if p == partition]


async def test_a_spark_pod_is_ready_only_once_its_session_is_started_and_warmed(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    factory, handler = Factory(), Handler()
    keeper = factory.keeper()
    async with spark_pod(fake_hub, fake_store, keeper, handler) as (consumer, source):
        # A new pod is given no partitions yet: it applies an empty assignment at once.
        source.put(consumerfakes.configmap(1, {}))
        await consumerfakes.eventually(
            lambda: consumer.applied_generation == 1, what="the empty assignment applied"
        )
        ready, reason = consumer.ready()
        assert not ready
        assert reason.startswith("SparkSession starting")
        await asyncio.sleep(START_S / 2)
        assert not consumer.ready()[0]
        await consumerfakes.eventually(lambda: consumer.ready()[0], what="Ready")
        assert asyncio.get_running_loop().time() >= START_S
        assert consumer.ready()[1] == "generation 1 applied"
        assert len(factory.built) == 1


async def test_a_lost_session_makes_the_pod_not_ready_until_a_new_one_is_warm(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    factory, handler = Factory(), Handler()
    keeper = factory.keeper()
    fake_hub.append("0", 5)
    async with spark_pod(fake_hub, fake_store, keeper, handler) as (consumer, source):
        await consumerfakes.eventually(
            lambda: keeper.ready()[0], within=2 * START_S, what="the first session"
        )
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(
            lambda: sequences(handler, "0") == [0, 1, 2, 3, 4], what="the first events"
        )
        assert consumer.ready()[0]

        factory.built[0].dead = True
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: not consumer.ready()[0], what="NotReady")
        assert consumer.ready()[1].startswith("SparkSession starting again after it was lost")
        lost_at = asyncio.get_running_loop().time()
        # The partition stays with the pod (the operator's grace period keeps it), its
        # batches waiting for the new session.
        assert consumer.owned() == {"0": 1}
        await consumerfakes.eventually(
            lambda: consumer.ready()[0], within=2 * START_S, what="Ready again"
        )
        assert asyncio.get_running_loop().time() - lost_at >= START_S - 1
        await consumerfakes.eventually(
            lambda: sequences(handler, "0")[-5:] == [5, 6, 7, 8, 9], what="the later events"
        )
        assert factory.discarded == [factory.built[0]]
        assert len(factory.built) == 2
        # The events did nothing wrong: no failed attempt counted, the checkpoint went on.
        retried: list[contexts.TriggerContext] = [c for c, _ in handler.triggers]
        assert all(c.attempt == 1 for c in retried)
        assert consumer.stats["0"].handler_errors == 0
        await consumerfakes.eventually(
            lambda: fake_store.blobs["0"].sequence_number == 9, what="the checkpoint"
        )


class JvmKiller(Handler):
    """Kills its session's JVM (the OOM killer) whenever its trigger holds ``poison``."""

    def __init__(self, poison: tuple[str, int]) -> None:
        super().__init__()
        self.poison = poison

    def __call__(self, df: Any, context: contexts.TriggerContext) -> None:
        super().__call__(df, context)
        if self.poison in self.triggers[-1][1]:
            context.spark.dead = True
            raise ConnectionError("Answer from Java side is empty")

    def poisoned(self) -> list[tuple[int, list[str]]]:
        return [
            (c.attempt, sorted(c.partitions)) for c, rows in self.triggers if self.poison in rows
        ]


async def test_a_batch_that_kills_the_sessions_jvm_again_and_again_is_parked(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """Before, each trigger that lost its session was handed to the next session without
    counting: a batch that got the JVM OOM-killed did so to every new session, about every
    12 s for ever (49 sessions in 10 minutes, the partition reported stuck, never parked).
    Now the first loss is free (a JVM can die of something else), and each later loss with the
    batch in the trigger counts a failed attempt; a trigger of several batches is retried
    with each alone first, so that partition 1's batch is never counted."""
    fake_hub.append("0", 5)
    fake_hub.append("1", 5)
    factory, handler = Factory(), JvmKiller(("0", 2))
    policy = {"processing": json.dumps({"maxAttempts": 3})}
    async with spark_pod(fake_hub, fake_store, factory.keeper(), handler) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}, **policy))
        await consumerfakes.eventually(
            lambda: "0" in source.reports and source.reports["0"].state == "parked",
            within=300,
            what="partition 0 parked",
        )
        report = source.reports["0"]
        assert report.attempts == 3
        assert report.error.startswith("SessionLostAgain: the SparkSession was lost again")
        # Lost with 0 and 1 (free), again (each alone now), then 0 alone three times.
        assert [partitions for _, partitions in handler.poisoned()] == [
            ["0", "1"],
            ["0", "1"],
            ["0"],
            ["0"],
            ["0"],
        ]
        assert len(factory.built) == 5
        await consumerfakes.eventually(lambda: fake_store.blobs["1"].sequence_number == 4)
        assert consumer.stats["1"].handler_errors == 0
        assert set(source.reports) == {"0"}


async def test_a_failing_trigger_on_a_live_session_counts_as_before(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    factory, handler = Factory(), Handler()
    keeper = factory.keeper()
    handler.fail["0"] = 1
    fake_hub.append("0", 5)
    async with spark_pod(fake_hub, fake_store, keeper, handler) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(
            lambda: (
                fake_store.blobs.get("0") is not None and fake_store.blobs["0"].sequence_number == 4
            ),
            within=3 * START_S,
            what="the events processed after a retry",
        )
        assert len(factory.built) == 1
        assert keeper.restarts == 0
        assert consumer.ready()[0]
        assert [c.attempt for c, _ in handler.triggers] == [1, 2]


class HangingFactory(Factory):
    """A `Factory` whose liveness check or disposal of a session never answers."""

    def __init__(self, *, alive_hangs: bool = False, discard_hangs: bool = False) -> None:
        super().__init__()
        self.alive_hangs = alive_hangs
        self.discard_hangs = discard_hangs
        self.never = asyncio.Event()

    async def alive(self, session: DyingSession) -> bool:
        if self.alive_hangs:
            await self.never.wait()  # a JVM in a GC spiral, a server that never answers
        return await super().alive(session)

    async def discard(self, session: DyingSession) -> None:
        if self.discard_hangs:
            await self.never.wait()
        await super().discard(session)


async def test_a_session_that_hangs_instead_of_dying_is_replaced_all_the_same() -> None:
    """The check runs inside the trigger loop: unbounded, a hung session would stop every
    partition of the pod for good, the pod still Ready."""
    lost_after = sessionkeeping.ALIVE_TIMEOUT_S
    factory, handler = HangingFactory(alive_hangs=True), Handler()
    keeper = factory.keeper()
    spark = triggers_on(keeper, handler)
    keeper.start()
    await spark(*batch("0", 0, 3))
    factory.built[0].dead = True
    loop = asyncio.get_running_loop()
    failed_at = loop.time()
    call = asyncio.ensure_future(spark(*batch("0", 3, 3)))
    await asyncio.wait({call}, timeout=lost_after + 2 * START_S)
    ended, took = call.done(), loop.time() - failed_at
    factory.never.set()  # whatever still hangs ends with the test
    await asyncio.gather(call, return_exceptions=True)
    assert ended, "the trigger loop still waits for the hung session"
    # Lost once the bounds passed, then a new session's start: the batch ran on it.
    assert took == pytest.approx(lost_after + START_S, abs=0.01)
    assert len(factory.built) == 2
    assert keeper.restarts == 1
    assert keeper.ready() == (True, "SparkSession warm")
    assert [rows for _, rows in handler.triggers][-1] == [("0", n) for n in range(3, 6)]


@pytest.mark.parametrize(
    ("alive_hangs", "lost_after"),
    [
        (False, sessionkeeping.DISCARD_TIMEOUT_S),
        (True, sessionkeeping.ALIVE_TIMEOUT_S + sessionkeeping.DISCARD_TIMEOUT_S),
    ],
    ids=["discard-hangs", "both-hang"],
)
async def test_a_lost_session_that_will_not_let_go_stops_the_pod(
    alive_hangs: bool, lost_after: float
) -> None:
    """A disposal that does not end goes on in its thread, and pyspark's stop, when it ends,
    resets the process-wide state a new session would use: the pod stops, as when a session
    cannot start (its partitions released), and no session is built beside the old one."""
    factory, handler = HangingFactory(alive_hangs=alive_hangs, discard_hangs=True), Handler()
    keeper = factory.keeper()
    failures: list[BaseException] = []
    keeper.on_failed = failures.append
    spark = triggers_on(keeper, handler)
    keeper.start()
    await spark(*batch("0", 0, 3))
    factory.built[0].dead = True
    loop = asyncio.get_running_loop()
    failed_at = loop.time()
    call = asyncio.ensure_future(spark(*batch("0", 3, 3)))
    await asyncio.wait({call}, timeout=lost_after + 2 * START_S)
    ended, took = call.done(), loop.time() - failed_at
    factory.never.set()
    await asyncio.gather(call, return_exceptions=True)
    assert ended, "the trigger loop still waits for the hung session"
    assert took == pytest.approx(lost_after, abs=0.01)
    said = "the lost SparkSession was not let go within 10 s"
    assert [str(e) for e in failures] == [said]
    assert len(factory.built) == 1
    assert keeper.ready() == (False, f"SparkSession did not start: {said}")
    assert [rows for _, rows in handler.triggers] == [[("0", n) for n in range(3)]]


async def test_a_release_withdraws_a_failed_triggers_batch_while_its_session_is_checked() -> None:
    """Between the failed trigger and its batches' next one, the session's liveness check
    runs (up to `sessionkeeping.ALIVE_TIMEOUT_S`): nothing of the batch is done meanwhile, and
    its release takes it back at once."""
    factory, handler = HangingFactory(alive_hangs=True), Handler()
    keeper = factory.keeper()
    spark = triggers_on(keeper, handler)
    keeper.start()
    await spark(*batch("0", 0, 3))
    factory.built[0].dead = True
    release = asyncio.Event()
    call = released_call(spark, release, "0", 3)
    await asyncio.sleep(1.0)  # the trigger failed; its session's check hangs
    assert spark.stats.failed == 1
    release.set()
    await asyncio.sleep(0.01)
    withdrawn_at_once = call.cancelled()
    factory.never.set()
    await asyncio.gather(call, return_exceptions=True)
    assert withdrawn_at_once
    await asyncio.sleep(sessionkeeping.ALIVE_TIMEOUT_S + 2 * START_S)
    assert len(factory.built) == 2  # lost, replaced: its batch did not come back
    assert [rows for _, rows in handler.triggers] == [[("0", n) for n in range(3)]]
    assert spark.stats.failed == 1


class StuckFactory(Factory):
    """A `Factory` whose session can stop processing without dying: a trigger's job then
    waits for good (a standalone master restarted: the new one killed the executors and
    knows nothing of the application), until the session is let go (stopped), which fails
    the job, as pyspark's ``stop()`` fails the jobs it cancels."""

    def __init__(self, executor: SteppedExecutor) -> None:
        super().__init__()
        self.executor = executor

    async def discard(self, session: DyingSession) -> None:
        await super().discard(session)
        session.dead = True
        while self.executor.waiting:
            self.executor.step()


async def test_a_trigger_that_hangs_on_a_session_that_cannot_process_is_moved_to_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trigger that never ends never fails, so no liveness check followed it: the pod stayed
    Ready, its partitions reported stuck and never processed again. The keeper asks a warm
    session every `sessionkeeping.WATCH_S` whether it still answers, and replaces it after
    `sessionkeeping.WATCH_STRIKES` noes in a row; letting it go fails the hung trigger, whose
    batches go to the new session without counting a failed attempt."""
    executor = SteppedExecutor()
    loop = asyncio.get_running_loop()
    # looptime moves fake time with real time while an executor's call is pending, as a real
    # thread may still end it; the stepped executor runs no thread, so the held job would
    # cost the watch's ~30 s for real.
    monkeypatch.setattr(
        loop, "run_in_executor", lambda pool, call: asyncio.wrap_future(pool.submit(call))
    )
    factory, handler = StuckFactory(executor), Handler()
    keeper = factory.keeper()
    spark = triggers.SparkTriggers(
        handler,
        session=keeper.get,
        consumer="orders",
        pod="pod-a",
        executor=executor,
        session_lost=keeper.lost,
    )
    keeper.start()
    await spark(*batch("0", 0, 3))
    executor.hold = True
    call = asyncio.ensure_future(spark(*batch("0", 3, 3)))
    watched = sessionkeeping.WATCH_S * (sessionkeeping.WATCH_STRIKES + 1)
    try:
        await asyncio.sleep(1.0)
        assert len(executor.waiting) == 1  # the trigger's job waits, its session answering no
        stuck_at = loop.time()
        factory.built[0].cannot_process = True
        await asyncio.sleep(watched - 1.0)
        ready, reason = keeper.ready()
        executor.hold = False
        await asyncio.wait({call}, timeout=2 * START_S)
        ended, took = call.done(), loop.time() - stuck_at
    finally:
        executor.hold = False
        while executor.waiting:  # whatever still hangs ends with the test
            executor.step()
        await asyncio.gather(call, return_exceptions=True)
        await keeper.stop(factory.discard)
    assert ended, "the trigger still hangs on a session that cannot process"
    assert call.exception() is None
    # Found lost within the watch's strikes, then a new session's start.
    assert took <= watched + START_S
    assert not ready
    assert reason.startswith("SparkSession starting again after it was lost")
    assert keeper.restarts == 1
    assert factory.discarded[0] is factory.built[0]
    assert len(factory.built) == 2
    assert keeper.ready() == (True, "SparkSession warm")
    # On the new session: the same events, no failed attempt counted.
    last, rows = handler.triggers[-1]
    assert rows == [("0", n) for n in range(3, 6)]
    assert last.attempt == 1
    assert last.spark is factory.built[1]


class GatewayGone(Exception):
    """py4j's error of a call whose JVM went away meanwhile: its text is asked of the JVM."""

    def __str__(self) -> str:
        raise ConnectionRefusedError("[Errno 111] Connection refused")


class UnspeakableSession(DyingSession):
    def createDataFrame(self, table: Any, schema: Any = None) -> Any:
        if self.dead:
            raise GatewayGone()
        return table


async def lose_the_session(
    kind: type[DyingSession],
) -> tuple[sessionkeeping.SessionKeeper, Handler, asyncio.Future[Any], bool]:
    """One trigger on a session of ``kind``, which then dies under the next trigger: the
    keeper, the handler, that trigger's call and whether it ended within a replacement."""
    factory, handler = Factory(), Handler()

    async def build() -> DyingSession:
        await asyncio.sleep(START_S)
        session = kind(len(factory.built) + 1)
        factory.built.append(session)
        return session

    keeper = sessionkeeping.SessionKeeper(build, alive=factory.alive, discard=factory.discard)
    spark = triggers_on(keeper, handler)
    keeper.start()
    await spark(*batch("0", 0, 3))
    factory.built[0].dead = True
    call = asyncio.ensure_future(spark(*batch("0", 3, 3)))
    await asyncio.wait({call}, timeout=sessionkeeping.ALIVE_TIMEOUT_S + 2 * START_S)
    ended = call.done()
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)
    await keeper.stop(factory.discard)
    return keeper, handler, call, ended


async def test_a_lost_sessions_error_that_cannot_be_told_still_has_it_replaced() -> None:
    keeper, handler, call, ended = await lose_the_session(UnspeakableSession)
    assert ended
    assert call.exception() is None
    assert keeper.restarts == 1
    assert [rows for _, rows in handler.triggers][-1] == [("0", n) for n in range(3, 6)]


class ServerGone(DyingSession):
    """A Spark Connect session whose server went away: its calls fail as grpcio says it."""

    def createDataFrame(self, table: Any, schema: Any = None) -> Any:
        if self.dead:
            raise RuntimeError(GRPC_GONE)
        return table


#: What ``str()`` of grpcio's error gives for a channel whose server stopped (taken from a
#: real call to a closed port), after SparkConnectGrpcException's name.
GRPC_GONE = (
    "<_InactiveRpcError of RPC that terminated with:\n"
    "\tstatus = StatusCode.UNAVAILABLE\n"
    '\tdetails = "failed to connect to all addresses; last error: UNKNOWN: '
    'ipv4:127.0.0.1:42225: Failed to connect to remote host: Connection refused"\n'
    '\tdebug_error_string = "UNAVAILABLE:failed to connect to all addresses; last error: '
    'UNKNOWN: ipv4:127.0.0.1:42225: Failed to connect to remote host: Connection refused"\n>'
)


async def test_a_connect_server_gone_is_said_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """A Spark Connect server stopped under a pod: its log said "the SparkSession was lost
    (SparkConnectGrpcException: <_InactiveRpcError of RPC that terminated with:" and four
    more lines of grpcio's, the cause in the middle and twice."""
    await lose_the_session(ServerGone)
    (said,) = [r.getMessage() for r in caplog.records if "was lost" in r.getMessage()]
    assert said == (
        "the SparkSession was lost (RuntimeError: failed to connect to all addresses; last "
        "error: UNKNOWN: ipv4:127.0.0.1:42225: Failed to connect to remote host: Connection "
        "refused (UNAVAILABLE)); starting a new one, NotReady until it is warm"
    )
