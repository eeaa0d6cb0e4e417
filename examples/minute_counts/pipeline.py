"""Per-minute counts by partition key, written as Parquet: an example ``--spark`` handler.

Run it in a consumer pod with::

    ehb consume --spark --handler minute_counts.pipeline:process --handler-path examples

Each micro-batch of one partition becomes one Parquet directory named after the batch
(``partition=<p>/epoch=<e>/batch=<first>-<last>``), written with mode ``overwrite``: a batch
that is retried after a handler error rewrites the same directory, so the sink stays
idempotent; a batch processed again by the next owner (only after a crash) lands under the
new epoch, where it can be seen and de-duplicated by sequence range. Readers get every batch
with ``spark.read.parquet(<output>)``, with ``partition`` and ``epoch`` as columns.

Settings: ``MINUTE_COUNTS_OUTPUT`` (a directory or any Hadoop URI, default
``./minute-counts``).
"""

from __future__ import annotations

import os
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eventhub_balancer.consumer import BatchContext

OUTPUT_ENV = "MINUTE_COUNTS_OUTPUT"


def output_root() -> str:
    return os.environ.get(OUTPUT_ENV, "minute-counts")


def minute_counts(df: DataFrame) -> DataFrame:
    """Events per (minute of enqueued time, partition key), with the batch's sequence range."""
    return (
        df.withColumn("minute", F.date_trunc("minute", F.col("enqueued_time")))
        .groupBy("minute", "partition_key")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.min("sequence_number").alias("first_sequence_number"),
            F.max("sequence_number").alias("last_sequence_number"),
        )
    )


def batch_path(root: str, context: BatchContext) -> str:
    return (
        f"{root}/partition={context.partition}/epoch={context.epoch}/"
        f"batch={context.first_sequence_number}-{context.last_sequence_number}"
    )


def process(df: DataFrame, context: BatchContext) -> Any:
    """The ``--spark`` handler: returns once the batch's Parquet files are written."""
    minute_counts(df).coalesce(1).write.mode("overwrite").parquet(
        batch_path(output_root(), context)
    )
