"""Turning a trigger's events into a Spark DataFrame, with a fixed schema.

The schema is explicit (inferring it from Python rows costs 2-4x, and would make a column's
type depend on the batch), and the rows go through Arrow: one columnar copy instead of a
Python object per cell. Application properties become strings (a map<string,string>):
Event Hubs allows any AMQP type there, and one column needs one type.

On a classic session the table reaches the JVM by ``createDataFrame``'s own route for Arrow
(a stream file the JVM reads, one Arrow batch per partition) without that call's per-call
overhead (`ArrowLoader`): it reads eight SQL settings from the JVM, converts the schema and
looks JVM classes up again, 76 py4j round trips a call where this makes 3 (and a few more
when the JVM references it made are let go). Each round trip needs the GIL back for its
answer, which an event loop busy receiving gives up only every switch interval
(`consumer.switchintervals.prompt_gil`), and costs the JVM's side CPU of its own.

Beside each event's own fields, every row carries what a sink needs to be idempotent: the
pod's trigger number, and its partition's epoch and sequence range in this trigger.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from eventhub_balancer.adapters import deliveries

#: The columns of every batch's DataFrame, in order, as Spark DDL (documented in docs/consumer.md).
SCHEMA_DDL: Final = (
    "partition STRING NOT NULL, sequence_number BIGINT NOT NULL, offset STRING NOT NULL, "
    "enqueued_time TIMESTAMP NOT NULL, partition_key STRING, "
    "properties MAP<STRING, STRING> NOT NULL, body BINARY NOT NULL, "
    "batch_id BIGINT NOT NULL, epoch BIGINT NOT NULL, "
    "first_sequence_number BIGINT NOT NULL, last_sequence_number BIGINT NOT NULL"
)

COLUMNS: Final = (
    "partition",
    "sequence_number",
    "offset",
    "enqueued_time",
    "partition_key",
    "properties",
    "body",
    "batch_id",
    "epoch",
    "first_sequence_number",
    "last_sequence_number",
)


class Range(Protocol):
    """A partition's share of a trigger (``consumer.contexts.PartitionRange``)."""

    @property
    def epoch(self) -> int: ...

    @property
    def first_sequence_number(self) -> int: ...

    @property
    def last_sequence_number(self) -> int: ...


def spark_schema() -> Any:
    """The batch schema as a ``pyspark.sql.types.StructType``."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("partition", T.StringType(), False),
            T.StructField("sequence_number", T.LongType(), False),
            T.StructField("offset", T.StringType(), False),
            T.StructField("enqueued_time", T.TimestampType(), False),
            T.StructField("partition_key", T.StringType(), True),
            T.StructField("properties", T.MapType(T.StringType(), T.StringType(), True), False),
            T.StructField("body", T.BinaryType(), False),
            T.StructField("batch_id", T.LongType(), False),
            T.StructField("epoch", T.LongType(), False),
            T.StructField("first_sequence_number", T.LongType(), False),
            T.StructField("last_sequence_number", T.LongType(), False),
        ]
    )


def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("partition", pa.string(), nullable=False),
            pa.field("sequence_number", pa.int64(), nullable=False),
            pa.field("offset", pa.string(), nullable=False),
            pa.field("enqueued_time", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("partition_key", pa.string(), nullable=True),
            pa.field("properties", pa.map_(pa.string(), pa.string()), nullable=False),
            pa.field("body", pa.binary(), nullable=False),
            pa.field("batch_id", pa.int64(), nullable=False),
            pa.field("epoch", pa.int64(), nullable=False),
            pa.field("first_sequence_number", pa.int64(), nullable=False),
            pa.field("last_sequence_number", pa.int64(), nullable=False),
        ]
    )


def _property_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return json.dumps(value, default=str)


def to_arrow(
    events: Sequence[deliveries.ReceivedEvent], *, batch_id: int, ranges: Mapping[str, Range]
) -> Any:
    """A ``pyarrow.Table`` with the batch schema; ``ranges`` holds every event's partition."""
    import pyarrow as pa

    shares = [ranges[e.partition] for e in events]
    return pa.Table.from_pydict(
        {
            "partition": [e.partition for e in events],
            "sequence_number": [e.sequence_number for e in events],
            "offset": [e.offset for e in events],
            "enqueued_time": [e.enqueued_time for e in events],
            "partition_key": [e.partition_key for e in events],
            "properties": [
                [(str(k), _property_text(v)) for k, v in e.properties.items()] for e in events
            ],
            "body": [e.body for e in events],
            "batch_id": [batch_id] * len(events),
            "epoch": [r.epoch for r in shares],
            "first_sequence_number": [r.first_sequence_number for r in shares],
            "last_sequence_number": [r.last_sequence_number for r in shares],
        },
        schema=arrow_schema(),
    )


def to_dataframe(
    session: Any,
    events: Sequence[deliveries.ReceivedEvent],
    *,
    batch_id: int,
    ranges: Mapping[str, Range],
    loader: ArrowLoader | None = None,
) -> Any:
    """A Spark DataFrame of the trigger (built from Arrow, never inferred); through
    ``loader`` (the session's `ArrowLoader`) when given, else by ``createDataFrame``."""
    table = to_arrow(events, batch_id=batch_id, ranges=ranges)
    if loader is not None and table.num_rows > 0:
        return loader.load(session, table)
    return session.createDataFrame(table, schema=spark_schema())


class ArrowLoader:
    """A classic session's DataFrame from a table with the batch schema, the way
    ``createDataFrame(table, schema)`` makes it (pyspark's ``_create_from_arrow_table``), with
    what that call looks up every time looked up once: the JVM methods, the schema as JSON,
    the Arrow batch size. Three py4j calls a DataFrame: the session made active for the
    calling thread (as ``createDataFrame`` does), the stream read, the DataFrame made.

    The table must have `arrow_schema` exactly: that is what ``createDataFrame`` would cast
    it to (timestamps in UTC, no large types), so nothing is converted here. Holds no
    reference to its session: its owner (`consumer.triggers.SparkTriggers`) keeps one per
    session it triggers on.
    """

    def __init__(self, session: Any) -> None:
        from pyspark.sql import SparkSession

        self._jvm = session._jvm
        self._jsession = session._jsparkSession
        utils = self._jvm.PythonSQLUtils
        self._read_stream = utils.readArrowStreamFromFile
        self._to_dataframe = utils.toDataFrame
        self._set_active = SparkSession._get_j_spark_session_class(self._jvm).setActiveSession
        self._schema = spark_schema()
        self._schema_json = self._schema.json()
        self._batch_rows = int(session.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch"))

    def load(self, session: Any, table: Any) -> Any:
        from pyspark.sql import DataFrame, SparkSession
        from pyspark.sql.pandas.serializers import ArrowStreamSerializer

        SparkSession._activeSession = session
        self._set_active(self._jsession)
        batches = table.to_batches(max_chunksize=self._batch_rows if self._batch_rows > 0 else None)
        # A file the JVM reads (or, with I/O encryption on, a socket): pyspark's own route.
        jbatches = session._sc._serialize_to_jvm(
            batches, ArrowStreamSerializer(), self._read_stream, self._stream_server
        )
        df = DataFrame(self._to_dataframe(jbatches, self._schema_json, self._jsession), session)
        df._schema = self._schema
        return df

    def _stream_server(self) -> Any:
        return self._jvm.ArrowIteratorServer()


def arrow_loader(session: Any) -> ArrowLoader | None:
    """A new `ArrowLoader` for ``session`` (it looks up what it needs once); None for a
    session that is not a classic pyspark one (Spark Connect sends the table over gRPC in one
    call: ``createDataFrame`` it is)."""
    if type(session).__module__ != "pyspark.sql.session" or not hasattr(session, "_jsparkSession"):
        return None
    return ArrowLoader(session)


#: Rounds of `warm_up`: measured on local[2], a trigger's job takes 5-10x its steady time at
#: first, and about its steady time after this many.
WARM_UP_ROUNDS: Final = 8


#: The events of `sample`: enough for a trigger's path to run whole, few enough to be quick.
SAMPLE_EVENTS: Final = 100


def warm_up(
    session: Any, *, rounds: int = WARM_UP_ROUNDS, loader: ArrowLoader | None = None
) -> None:
    """A few small DataFrames through the whole path (Arrow, the DataFrame, a job with a
    shuffle) on a new session; through ``loader`` when given, as the triggers build theirs.

    A new JVM interprets that path before it compiles it: the first triggers take seconds
    where later ones take a tenth of that. Done beside the receivers, while they fill, it keeps
    that cost out of the first triggers.
    """
    events, ranges = sample()
    for _ in range(rounds):
        df = to_dataframe(session, events, batch_id=0, ranges=ranges, loader=loader)
        df.groupBy("partition").count().collect()


def sample() -> tuple[list[deliveries.ReceivedEvent], dict[str, Range]]:
    """`SAMPLE_EVENTS` small events over partitions "0" and "1", enqueued now, and their
    ranges: what the warm-up and the class archive's run put through a trigger's path."""
    count = SAMPLE_EVENTS
    now = datetime.datetime.now(datetime.UTC)
    events = [
        deliveries.ReceivedEvent(
            partition=str(n % 2),
            sequence_number=n,
            offset=str(n),
            enqueued_time=now,
            partition_key=None,
            properties={"warm": "up"},
            body=b"",
        )
        for n in range(count)
    ]
    share = _Share(epoch=0, first_sequence_number=0, last_sequence_number=count - 1)
    return events, {"0": share, "1": share}


@dataclasses.dataclass(frozen=True)
class _Share:
    epoch: int
    first_sequence_number: int
    last_sequence_number: int
