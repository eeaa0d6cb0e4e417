"""Turning a trigger's events into a Spark DataFrame, with a fixed schema.

The schema is explicit (inferring it from Python rows costs 2-4x, and would make a column's
type depend on the batch), and the rows go through Arrow: one columnar copy instead of a
Python object per cell. Application properties become strings (a map<string,string>):
Event Hubs allows any AMQP type there, and one column needs one type.

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
) -> Any:
    """A Spark DataFrame of the trigger (built from Arrow, never inferred)."""
    return session.createDataFrame(
        to_arrow(events, batch_id=batch_id, ranges=ranges), schema=spark_schema()
    )


#: Rounds of `warm_up`: measured on local[2], a trigger's job takes 5-10x its steady time at
#: first, and about its steady time after this many.
WARM_UP_ROUNDS: Final = 8


def warm_up(session: Any, *, rounds: int = WARM_UP_ROUNDS) -> None:
    """A few small DataFrames through the whole path (Arrow, the DataFrame, a job with a
    shuffle) on a new session.

    A new JVM interprets that path before it compiles it: the first triggers take seconds
    where later ones take a tenth of that. Done beside the receivers, while they fill, it keeps
    that cost out of the first triggers.
    """
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
        for n in range(100)
    ]
    share = _Share(epoch=0, first_sequence_number=0, last_sequence_number=99)
    for _ in range(rounds):
        df = to_dataframe(session, events, batch_id=0, ranges={"0": share, "1": share})
        df.groupBy("partition").count().collect()


@dataclasses.dataclass(frozen=True)
class _Share:
    epoch: int
    first_sequence_number: int
    last_sequence_number: int
