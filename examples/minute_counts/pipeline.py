"""Per-minute counts by partition key, written as Parquet: an example ``--spark`` handler.

Run it in a consumer pod with::

    ehb consume --spark --handler minute_counts.pipeline:process --handler-path examples

Each trigger hands over one DataFrame with the events of every partition the pod runs. The
counts of each partition's share land in a Parquet directory named after it
(``partition=<p>/epoch=<e>/batch=<first>-<last>``), written with dynamic partition overwrite:
a trigger retried after a handler error rewrites the same directories (and touches no
other), so the sink stays idempotent; events processed again by the next owner (only after a
crash) land under the new epoch, where they can be seen and de-duplicated by sequence range.
Readers get every batch with ``spark.read.parquet(<output>)``, with ``partition``, ``epoch``
and ``batch`` as columns. For output that is exactly once even across crashes, see the
``exactly_once`` example.

Settings: ``MINUTE_COUNTS_OUTPUT`` (a directory or any Hadoop URI, default
``./minute-counts``).
"""

from __future__ import annotations

import os
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eventhub_balancer.consumer import TriggerContext

OUTPUT_ENV = "MINUTE_COUNTS_OUTPUT"


def output_root() -> str:
    return os.environ.get(OUTPUT_ENV, "minute-counts")


def minute_counts(df: DataFrame) -> DataFrame:
    """Events per (partition's batch, minute of enqueued time, partition key)."""
    return (
        df.withColumn("minute", F.date_trunc("minute", F.col("enqueued_time")))
        .withColumn("batch", F.concat_ws("-", "first_sequence_number", "last_sequence_number"))
        .groupBy("partition", "epoch", "batch", "minute", "partition_key")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.min("sequence_number").alias("first_sequence_number"),
            F.max("sequence_number").alias("last_sequence_number"),
        )
    )


def process(df: DataFrame, context: TriggerContext) -> Any:
    """The ``--spark`` handler: returns once the trigger's Parquet files are written."""
    (
        minute_counts(df)
        .repartition("partition", "epoch", "batch")
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("partition", "epoch", "batch")
        .parquet(output_root())
    )
