"""Batches become DataFrames with the fixed schema; the example pipeline counts them."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import contexts
from eventhub_balancer.spark import flags, frames, sessions
from tests.support import paths

EXAMPLES = paths.EXAMPLES
T0 = datetime.datetime(2026, 1, 1, 12, 0, 30, tzinfo=datetime.UTC)


def events(count: int, *, partition: str = "3") -> list[deliveries.ReceivedEvent]:
    return [
        deliveries.ReceivedEvent(
            partition=partition,
            sequence_number=100 + n,
            offset=str(1000 + n),
            enqueued_time=T0 + datetime.timedelta(seconds=n * 20),
            partition_key=None if n == 0 else f"k{n % 2}",
            properties={"n": n, "raw": b"\xff", "text": "t"},
            body=f"body-{n}".encode(),
        )
        for n in range(count)
    ]


def test_spark_conf_flags() -> None:
    assert flags.parse_conf(["a.b=1", "c = x=y"]) == {"a.b": "1", "c": "x=y"}
    with pytest.raises(errors.InvalidInput, match="--spark-conf"):
        flags.parse_conf(["novalue"])


def ranges_of(
    batch: list[deliveries.ReceivedEvent], *, epoch: int = 2
) -> dict[str, contexts.PartitionRange]:
    """Each partition's share of ``batch`` as a trigger would give it."""
    found: dict[str, contexts.PartitionRange] = {}
    for partition in {e.partition for e in batch}:
        mine = [e.sequence_number for e in batch if e.partition == partition]
        found[partition] = contexts.PartitionRange(
            partition=partition,
            epoch=epoch,
            first_sequence_number=min(mine),
            last_sequence_number=max(mine),
            size=len(mine),
        )
    return found


def test_arrow_table_has_the_schema() -> None:
    batch = events(3)
    table = frames.to_arrow(batch, batch_id=7, ranges=ranges_of(batch))
    assert table.column_names == list(frames.COLUMNS)
    assert table.column("batch_id").to_pylist() == [7, 7, 7]
    assert table.column("first_sequence_number").to_pylist() == [100, 100, 100]
    assert table.column("last_sequence_number").to_pylist() == [102, 102, 102]
    assert table.column("sequence_number").to_pylist() == [100, 101, 102]
    assert table.column("partition_key").to_pylist() == [None, "k1", "k0"]
    assert dict(table.column("properties").to_pylist()[1]) == {
        "n": "1",
        "raw": "\ufffd",
        "text": "t",
    }


@pytest.mark.spark
def test_dataframe_of_a_batch(spark_session: Any) -> None:
    batch = events(4)
    df = frames.to_dataframe(spark_session, batch, batch_id=1, ranges=ranges_of(batch))
    assert df.schema == frames.spark_schema()
    rows = df.orderBy("sequence_number").collect()
    assert [r.sequence_number for r in rows] == [100, 101, 102, 103]
    assert rows[1].body == bytearray(b"body-1")
    assert rows[2].properties["n"] == "2"
    assert rows[0].partition_key is None
    assert rows[0].enqueued_time.replace(tzinfo=datetime.UTC) == T0.replace(tzinfo=None).replace(
        tzinfo=datetime.UTC
    )


@pytest.mark.spark
def test_a_classic_session_loads_the_table_as_createdataframe_would(
    spark_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger's DataFrame skips createDataFrame's per-call lookups (about 75 py4j round
    trips, each waiting for the GIL beside a busy event loop), and is the same DataFrame."""
    import gc

    from py4j.clientserver import ClientServerConnection  # type: ignore[import-untyped]
    from py4j.java_gateway import GatewayConnection  # type: ignore[import-untyped]

    batch = [*events(40), *events(30, partition="5")]
    ranges = ranges_of(batch)
    loader = frames.arrow_loader(spark_session)
    assert loader is not None
    # Its owner keeps it beside the session: the loader itself does not hold the session.
    assert all(value is not spark_session for value in vars(loader).values())
    round_trips = 0
    # Pinned threads (pyspark's default) talk through the first, else through the second.
    for connection in (ClientServerConnection, GatewayConnection):

        def counted(self: Any, command: str, *, send: Any = connection.send_command) -> Any:
            nonlocal round_trips
            round_trips += 1
            return send(self, command)

        monkeypatch.setattr(connection, "send_command", counted)
    gc.disable()  # a collected JVM reference is a round trip of its own
    try:
        df = frames.to_dataframe(spark_session, batch, batch_id=4, ranges=ranges, loader=loader)
        ours = round_trips
        round_trips = 0
        table = frames.to_arrow(batch, batch_id=4, ranges=ranges)
        public = spark_session.createDataFrame(table, schema=frames.spark_schema())
        theirs = round_trips
    finally:
        gc.enable()
    assert ours <= 6 < 30 < theirs
    assert df.schema == public.schema == frames.spark_schema()
    assert df.rdd.getNumPartitions() == public.rdd.getNumPartitions()
    order = ["partition", "sequence_number"]
    assert df.orderBy(*order).collect() == public.orderBy(*order).collect()


def test_other_sessions_get_createdataframe() -> None:
    """A Spark Connect session (or a test's fake) has no JVM here: the public call it is."""

    class Fake:
        def createDataFrame(self, table: Any, schema: Any = None) -> Any:
            return ("created", table.num_rows, schema)

    batch = events(2)
    assert frames.arrow_loader(Fake()) is None
    assert frames.to_dataframe(Fake(), batch, batch_id=1, ranges=ranges_of(batch)) == (
        "created",
        2,
        frames.spark_schema(),
    )


@pytest.mark.spark
def test_a_local_driver_compiles_with_c1_only(spark_session: Any) -> None:
    jvm = spark_session.sparkContext._jvm
    arguments = list(
        jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    )
    assert sessions.LOCAL_JAVA_OPTIONS in arguments
    assert sessions.LOCAL_CONF["spark.driver.extraJavaOptions"] == sessions.LOCAL_JAVA_OPTIONS


@pytest.mark.spark
def test_example_pipeline_writes_minute_counts(
    spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [str(EXAMPLES), *sys.path])
    from minute_counts import pipeline

    monkeypatch.setenv(pipeline.OUTPUT_ENV, str(tmp_path / "out"))
    # 12:00:30 + 20 s steps: 12:00 has 2 events, 12:01 three, 12:02 one; partition 4's one
    # event lands in a directory of its own.
    batch = [*events(6), *events(1, partition="4")]
    ranges = ranges_of(batch)
    context = contexts.TriggerContext(
        batch_id=1,
        consumer="orders",
        pod="pod-a",
        partitions=ranges,
        size=len(batch),
        spark=spark_session,
    )
    df = frames.to_dataframe(spark_session, batch, batch_id=1, ranges=ranges)
    pipeline.process(df, context)
    pipeline.process(df, context)  # a retry: idempotent
    written = spark_session.read.parquet(str(tmp_path / "out"))
    got = sorted(
        (r.minute.minute, r.partition_key or "", r.events, r.partition, r.epoch)
        for r in written.collect()
    )
    assert got == [
        (0, "", 1, 3, 2),
        (0, "", 1, 4, 2),
        (0, "k1", 1, 3, 2),
        (1, "k0", 2, 3, 2),
        (1, "k1", 1, 3, 2),
        (2, "k1", 1, 3, 2),
    ]
    assert (tmp_path / "out" / "partition=3" / "epoch=2" / "batch=100-105").is_dir()
    assert (tmp_path / "out" / "partition=4" / "epoch=2" / "batch=100-100").is_dir()


@pytest.mark.spark
def test_a_failed_write_is_reported_by_its_java_cause(
    spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler whose Parquet write failed (an output directory it may not create) was
    reported as ``Py4JJavaError: An error occurred while calling o254.parquet.``, in the
    status and the Events: no cause, and a new object name at every attempt."""
    from eventhub_balancer.contracts import partitionreports

    monkeypatch.setattr(sys, "path", [str(EXAMPLES), *sys.path])
    from minute_counts import pipeline

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(pipeline.OUTPUT_ENV, str(tmp_path / "a-file" / "out"))
    batch = events(2)
    ranges = ranges_of(batch)
    context = contexts.TriggerContext(
        batch_id=1, consumer="orders", pod="pod-a", partitions=ranges, size=2, spark=spark_session
    )
    df = frames.to_dataframe(spark_session, batch, batch_id=1, ranges=ranges)
    from py4j.protocol import Py4JJavaError

    with pytest.raises(Py4JJavaError) as raised:
        pipeline.process(df, context)
    said = partitionreports.first_line(f"{type(raised.value).__name__}: {raised.value}")
    assert said.startswith("Py4JJavaError: calling parquet: "), said
    cause = said.split("parquet: ", 1)[1]
    assert "ParentNotDirectoryException" in cause, said
    assert "a-file" in cause, said
