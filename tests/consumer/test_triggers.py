"""Spark mode's triggers on fake time: one handler call over every waiting partition's batch,
the trigger interval and size, per-partition failures, cancellation and the session's start
(the runtime around them: `tests.consumer.test_spark_runtime`).

The "Spark" here is a fake session whose DataFrame is the Arrow table itself, and the handler
runs in an executor the test steps by hand: no JVM, no real thread. While a held call waits,
looptime does not move the clock (the loop waits on the executor), so those sleeps are short.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import sys
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import generate_latest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import (
    contexts,
    metrics,
    partitionfailures,
    processing,
    switchintervals,
    triggers,
)
from eventhub_balancer.spark import frames
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime


class FakeSession:
    """``createDataFrame`` hands back the Arrow table: the handler reads its columns."""

    def createDataFrame(self, table: Any, schema: Any = None) -> Any:
        return table


class SteppedExecutor(concurrent.futures.Executor):
    """Runs a call when the test says so (``hold``), or at once; never in another thread."""

    def __init__(self) -> None:
        self.hold = False
        self.waiting: list[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.waiting.append((future, lambda: fn(*args, **kwargs)))
        if not self.hold:
            self.step()
        return future

    def step(self) -> None:
        future, call = self.waiting.pop(0)
        try:
            future.set_result(call())
        except Exception as e:
            future.set_exception(e)


class Handler:
    """Records every trigger: its context and (partition, sequence number) rows; fails the
    partitions in ``fail`` (unnamed) or ``name`` (named with PartitionsFailed) so many times."""

    def __init__(self) -> None:
        self.triggers: list[tuple[contexts.TriggerContext, list[tuple[str, int]]]] = []
        self.fail: dict[str, int] = {}
        self.name: dict[str, int] = {}

    def __call__(self, df: Any, context: contexts.TriggerContext) -> None:
        rows = list(
            zip(
                df.column("partition").to_pylist(),
                df.column("sequence_number").to_pylist(),
                strict=True,
            )
        )
        self.triggers.append((context, rows))
        named = {p: f"bad event in {p}" for p in context.partitions if self.name.get(p, 0) > 0}
        for p in named:
            self.name[p] -= 1
        if named:
            raise partitionfailures.PartitionsFailed(named)
        for p in context.partitions:
            if self.fail.get(p, 0) > 0:
                self.fail[p] -= 1
                raise RuntimeError(f"poison in {p}")

    def sizes(self) -> list[dict[str, int]]:
        return [{p: r.size for p, r in c.partitions.items()} for c, _ in self.triggers]


def batch(partition: str, first: int, size: int, *, attempt: int = 1) -> Any:
    events = [
        deliveries.ReceivedEvent(
            partition=partition,
            sequence_number=n,
            offset=str(n * 10),
            enqueued_time=consumerfakes.T0,
            partition_key=None,
            properties={},
            body=b"x",
        )
        for n in range(first, first + size)
    ]
    context = contexts.BatchContext(
        partition=partition,
        epoch=3,
        consumer="orders",
        pod="pod-a",
        first_sequence_number=first,
        last_sequence_number=first + size - 1,
        size=size,
        attempt=attempt,
    )
    return events, context


def spark_triggers(
    handler: Handler,
    *,
    executor: SteppedExecutor | None = None,
    settings: triggers.TriggerSettings | None = None,
    session: Callable[[], Any] | None = None,
) -> triggers.SparkTriggers:
    async def ready() -> Any:
        return FakeSession()

    return triggers.SparkTriggers(
        handler,
        session=session or ready,
        consumer="orders",
        pod="pod-a",
        settings=settings or triggers.TriggerSettings(),
        executor=executor or SteppedExecutor(),
    )


async def test_waiting_batches_of_every_partition_make_one_trigger() -> None:
    handler = Handler()
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(handler, executor=executor)
    first = asyncio.ensure_future(spark(*batch("0", 0, 5)))
    await consumerfakes.eventually(lambda: bool(executor.waiting), what="the first trigger")
    # While trigger 1 runs, three partitions' batches wait: they make trigger 2 together.
    calls = [asyncio.ensure_future(spark(*batch(p, 10, 4))) for p in ("1", "2", "3")]
    await asyncio.sleep(0.1)
    executor.step()
    await first
    await consumerfakes.eventually(lambda: bool(executor.waiting), what="the second trigger")
    executor.step()
    await asyncio.gather(*calls)
    assert handler.sizes() == [{"0": 5}, {"1": 4, "2": 4, "3": 4}]
    context, rows = handler.triggers[1]
    assert (context.batch_id, context.size, context.attempt) == (2, 12, 1)
    assert context.partitions["2"] == contexts.PartitionRange(
        partition="2", epoch=3, first_sequence_number=10, last_sequence_number=13, size=4
    )
    assert sorted(rows) == [(p, n) for p in ("1", "2", "3") for n in range(10, 14)]
    assert (spark.stats.succeeded, spark.stats.failed, spark.batch_id) == (2, 0, 2)
    assert spark.stats.events == 5 + 12
    # ... and on /metrics.
    text = generate_latest(metrics.registry_for(dict, triggers=spark.stats)).decode()
    assert 'ehb_consumer_spark_triggers_total{outcome="ok"} 2.0' in text
    assert 'ehb_consumer_spark_triggers_total{outcome="failed"} 0.0' in text
    assert "ehb_consumer_spark_trigger_events_total 17.0" in text
    assert "ehb_consumer_spark_last_trigger_seconds " in text


async def test_a_trigger_takes_whole_batches_up_to_max_events() -> None:
    handler = Handler()
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(
        handler, executor=executor, settings=triggers.TriggerSettings(max_events=10)
    )
    calls = [asyncio.ensure_future(spark(*batch(p, 0, 4))) for p in "0123"]
    calls.append(asyncio.ensure_future(spark(*batch("4", 0, 25))))  # more than max: alone
    for _ in range(3):
        await consumerfakes.eventually(lambda: bool(executor.waiting))
        executor.step()
    await asyncio.gather(*calls)
    assert handler.sizes() == [{"0": 4, "1": 4}, {"2": 4, "3": 4}, {"4": 25}]


async def test_triggers_start_an_interval_apart_unless_a_full_one_waits() -> None:
    handler = Handler()
    spark = spark_triggers(handler, settings=triggers.TriggerSettings(interval=2.0, max_events=10))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await spark(*batch("0", 0, 3))
    await spark(*batch("0", 3, 3))
    second = loop.time() - t0
    # A full trigger's worth (12 events waiting, 10 the most) does not wait for the interval:
    # the first 6 go at once, the other 6 an interval later.
    await asyncio.gather(spark(*batch("1", 0, 6)), spark(*batch("2", 0, 6)))
    third = loop.time() - t0
    # The first trigger started once no other batch came for SETTLE_S.
    assert second == pytest.approx(triggers.SETTLE_S + 2.0, abs=0.01)
    assert third == pytest.approx(triggers.SETTLE_S + 4.0, abs=0.01)
    assert handler.sizes()[2:] == [{"1": 6}, {"2": 6}]


async def test_a_trigger_waits_a_moment_for_the_last_triggers_partitions() -> None:
    """Without it, a partition handed in first would run alone, the rest after it, and so on
    for good; with it, they meet again in one trigger."""
    handler = Handler()
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(handler, executor=executor)
    first = asyncio.ensure_future(spark(*batch("0", 0, 5)))
    await consumerfakes.eventually(lambda: bool(executor.waiting))
    others = [asyncio.ensure_future(spark(*batch(p, 0, 5))) for p in "123"]
    await asyncio.sleep(0.1)
    executor.step()
    await first
    await consumerfakes.eventually(lambda: bool(executor.waiting))
    executor.step()
    await asyncio.gather(*others)  # trigger 2: partitions 1-3
    executor.hold = False
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    # Partition 0 comes back first; 1-3 follow 0.1 s later (their checkpoints took longer).
    zero = asyncio.ensure_future(spark(*batch("0", 5, 5)))
    await asyncio.sleep(0.1)
    await asyncio.gather(zero, *(spark(*batch(p, 5, 5)) for p in "123"))
    assert handler.sizes()[2:] == [{"0": 5, "1": 5, "2": 5, "3": 5}]
    # A partition that does not come back holds a trigger up GATHER_S at most, once.
    await spark(*batch("0", 10, 5))
    assert handler.sizes()[3:] == [{"0": 5}]
    assert loop.time() - t0 == pytest.approx(0.1 + triggers.GATHER_S, abs=0.01)
    await spark(*batch("0", 15, 5))
    assert loop.time() - t0 == pytest.approx(0.1 + triggers.GATHER_S, abs=0.01)


async def test_the_first_trigger_waits_until_the_batches_stop_coming() -> None:
    """The partitions' first batches come a few milliseconds apart: without the wait, the
    first would make a trigger alone and the others the next one."""
    handler = Handler()
    spark = spark_triggers(handler)
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def handed_in(partition: str, after: float) -> float:
        await asyncio.sleep(after)
        await spark(*batch(partition, 0, 2))
        return loop.time() - t0

    step = triggers.SETTLE_S / 2
    late = 3 * step + 2 * triggers.SETTLE_S  # after the trigger started
    done = await asyncio.gather(
        *(handed_in(p, n * step) for n, p in enumerate("0123")), handed_in("4", late)
    )
    assert handler.sizes() == [{"0": 2, "1": 2, "2": 2, "3": 2}, {"4": 2}]
    assert done[:4] == [pytest.approx(3 * step + triggers.SETTLE_S, abs=0.01)] * 4


async def test_the_first_trigger_waits_gather_s_at_most_for_batches_that_keep_coming() -> None:
    handler = Handler()
    spark = spark_triggers(handler)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    step = triggers.SETTLE_S * 0.8
    count = int(2 * triggers.GATHER_S / step)

    async def handed_in(n: int) -> float:
        await asyncio.sleep(n * step)
        await spark(*batch(str(n), 0, 1))
        return loop.time() - t0

    done = await asyncio.gather(*(handed_in(n) for n in range(count)))
    first = len(handler.sizes()[0])
    assert first == int(triggers.GATHER_S / step) + 1  # those handed in by GATHER_S
    assert done[0] == pytest.approx(triggers.GATHER_S, abs=0.01)


async def test_the_gil_changes_hands_often_while_a_trigger_runs() -> None:
    """The handler thread's py4j calls each need the GIL back: while a trigger runs the
    event loop gives it up every `switchintervals.TRIGGER_SWITCH_INTERVAL_S`, then as before."""
    before = sys.getswitchinterval()
    seen: list[float] = []

    class Recording(Handler):
        def __call__(self, df: Any, context: contexts.TriggerContext) -> None:
            seen.append(sys.getswitchinterval())
            super().__call__(df, context)

    handler = Recording()
    handler.fail = {"1": 1}
    spark = spark_triggers(handler)
    await spark(*batch("0", 0, 2))
    with pytest.raises(RuntimeError, match="poison in 1"):
        await spark(*batch("1", 0, 2))
    assert seen == [switchintervals.TRIGGER_SWITCH_INTERVAL_S] * 2
    assert sys.getswitchinterval() == before


async def queued_behind_a_trigger(
    handler: Handler, partitions: str
) -> tuple[triggers.SparkTriggers, dict[str, asyncio.Future[None]]]:
    """Batches of ``partitions`` (2 events each) queued while a trigger of partition 9 runs,
    then that trigger let go: they make the next trigger together."""
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(handler, executor=executor)
    blocker = asyncio.ensure_future(spark(*batch("9", 0, 1)))
    await consumerfakes.eventually(lambda: bool(executor.waiting))
    calls: dict[str, asyncio.Future[None]] = {
        p: asyncio.ensure_future(spark(*batch(p, 0, 2))) for p in partitions
    }
    await asyncio.sleep(0.1)
    executor.hold = False
    executor.step()
    await blocker
    return spark, calls


async def test_a_named_failure_fails_only_its_partition() -> None:
    handler = Handler()
    handler.name = {"1": 1}
    _, calls = await queued_behind_a_trigger(handler, "012")
    with pytest.raises(partitionfailures.PartitionFailed, match="bad event in 1"):
        await calls["1"]
    await asyncio.gather(calls["0"], calls["2"])
    # The others went to the next trigger again, without counting a failure.
    assert handler.sizes()[1:] == [{"0": 2, "1": 2, "2": 2}, {"0": 2, "2": 2}]
    assert handler.triggers[2][0].attempt == 2


async def test_an_unnamed_failure_is_retried_partition_by_partition() -> None:
    handler = Handler()
    handler.fail = {"1": 5}
    spark, calls = await queued_behind_a_trigger(handler, "012")
    # Alone, partition 1 fails with the handler's own error: that is what its worker counts.
    with pytest.raises(RuntimeError, match="poison in 1"):
        await calls["1"]
    await asyncio.gather(calls["0"], calls["2"])
    assert handler.sizes()[1:] == [{"0": 2, "1": 2, "2": 2}, {"0": 2}, {"1": 2}, {"2": 2}]
    assert spark.stats.failed == 2


async def test_a_queued_batch_leaves_at_once_when_cancelled() -> None:
    handler = Handler()
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(handler, executor=executor)
    running = asyncio.ensure_future(spark(*batch("0", 0, 1)))
    await consumerfakes.eventually(lambda: bool(executor.waiting))
    queued = asyncio.ensure_future(spark(*batch("1", 0, 1)))
    await asyncio.sleep(0.1)
    queued.cancel()
    running.cancel()
    await asyncio.sleep(0.1)
    assert queued.cancelled()
    # The call whose trigger runs ends only when the trigger does (a thread is not stopped).
    assert not running.done()
    executor.hold = False
    executor.step()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert handler.sizes() == [{"0": 1}]


async def test_the_first_trigger_waits_for_the_session_and_its_failure_reaches_every_batch() -> (
    None
):
    handler = Handler()
    started = asyncio.Event()

    async def slow_session() -> Any:
        await started.wait()
        return FakeSession()

    spark = spark_triggers(handler, session=slow_session)
    calls = [asyncio.ensure_future(spark(*batch(p, 0, 3))) for p in "01"]
    await asyncio.sleep(8)
    assert handler.triggers == []
    started.set()
    await asyncio.gather(*calls)
    assert handler.sizes() == [{"0": 3, "1": 3}]

    async def no_java() -> Any:
        raise errors.ConfigurationError("cannot start a SparkSession: no Java")

    broken = spark_triggers(handler, session=no_java)
    with pytest.raises(errors.ConfigurationError, match="no Java"):
        await broken(*batch("0", 3, 3))


async def test_a_batch_waiting_with_its_trigger_for_the_session_leaves_when_cancelled() -> None:
    """The trigger waits for the session before it takes its batches: until the session is
    there (the first one, or a new one after a loss) they can still be withdrawn."""
    handler = Handler()
    started = asyncio.Event()

    async def slow_session() -> Any:
        await started.wait()
        return FakeSession()

    spark = spark_triggers(handler, session=slow_session)
    withdrawn = asyncio.ensure_future(spark(*batch("0", 0, 3)))
    kept = asyncio.ensure_future(spark(*batch("1", 0, 3)))
    await asyncio.sleep(1.0)  # well past SETTLE_S: the trigger waits for the session
    withdrawn.cancel()  # the release's deadline
    await asyncio.sleep(0.01)
    withdrawn_at_once = withdrawn.cancelled()
    started.set()
    assert withdrawn_at_once
    await kept
    assert handler.sizes() == [{"1": 3}]


def released_call(
    spark: triggers.SparkTriggers, release: asyncio.Event, partition: str, first: int
) -> asyncio.Future[None]:
    """A call as a partition's worker makes it: told of the partition's release."""
    context = contextvars.copy_context()
    context.run(processing.release_started.set, release)
    return context.run(asyncio.ensure_future, spark(*batch(partition, first, 2)))


async def test_a_release_withdraws_its_queued_batch_at_once_and_lets_a_running_one_finish() -> None:
    handler = Handler()
    executor = SteppedExecutor()
    executor.hold = True
    spark = spark_triggers(handler, executor=executor)
    releases = {p: asyncio.Event() for p in "01"}
    running = released_call(spark, releases["0"], "0", 0)
    await consumerfakes.eventually(lambda: bool(executor.waiting), what="the first trigger")
    queued = released_call(spark, releases["1"], "1", 0)
    await asyncio.sleep(0.1)
    for release in releases.values():
        release.set()
    await asyncio.sleep(0.01)
    try:
        # Queued: withdrawn at once, unprocessed (the next owner processes it).
        assert queued.cancelled()
        # Running: not interrupted, done when its trigger returns (its checkpoint follows).
        assert not running.done()
    finally:
        executor.hold = False  # the held trigger ends: so does the test, passed or not
        while executor.waiting:
            executor.step()
    await running
    assert handler.sizes() == [{"0": 2}]
    # A batch handed in after its release started never waits for a trigger.
    with pytest.raises(asyncio.CancelledError):
        await released_call(spark, releases["0"], "0", 2)
    await asyncio.sleep(1.0)
    assert handler.sizes() == [{"0": 2}]


def test_settings_say_what_to_change() -> None:
    with pytest.raises(errors.InvalidInput, match="--trigger-interval"):
        triggers.TriggerSettings(interval=-1)
    with pytest.raises(errors.InvalidInput, match="--max-events-per-trigger"):
        triggers.TriggerSettings(max_events=0)

    async def process(df: Any, context: Any) -> None: ...

    with pytest.raises(errors.InvalidInput, match="plain function"):
        spark_triggers(process)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInput, match="--handler-concurrency"):
        processing.handler_threads(0)


async def test_each_session_gets_one_arrow_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trigger's DataFrame goes through a loader made once per session (`frames`), and a
    session that replaced a lost one gets a loader of its own."""
    made: list[Any] = []
    used: list[Any] = []

    def arrow_loader(session: Any) -> Any:
        made.append(session)
        return ("loader", len(made))

    real = frames.to_dataframe

    def to_dataframe(session: Any, events: Any, **kwargs: Any) -> Any:
        used.append(kwargs.pop("loader"))
        return real(session, events, **kwargs)

    monkeypatch.setattr(frames, "arrow_loader", arrow_loader)
    monkeypatch.setattr(frames, "to_dataframe", to_dataframe)
    sessions = [FakeSession(), FakeSession()]
    current = sessions[0]

    async def session() -> Any:
        return current

    spark = spark_triggers(Handler(), session=session)
    await spark(*batch("0", 0, 5))
    await spark(*batch("0", 5, 5))
    current = sessions[1]
    await spark(*batch("0", 10, 5))
    assert made == sessions
    assert used == [("loader", 1), ("loader", 1), ("loader", 2)]
