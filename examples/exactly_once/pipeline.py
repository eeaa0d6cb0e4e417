"""Every event exactly once in a Parquet table, across crashes: an example ``--spark`` handler.

Run it in a consumer pod with::

    ehb consume --spark --handler exactly_once.pipeline:process --handler-path examples

and read the table with :func:`read_table` (or ``spark.read.parquet(<output>)``).

The table
---------
One row per event: ``partition``, ``sequence_number``, ``offset``, ``enqueued_time``,
``partition_key``, ``body`` (decoded as UTF-8 text), ``epoch`` (the owner epoch of the pod
that wrote it) and ``batch_id`` (that pod's trigger number). The rows of each partition's
batch form one directory, ``eh_partition=<partition>/batch_first=<first sequence number>``,
written with dynamic partition overwrite: a write replaces the directories its rows go to,
whole, and touches no other. Only pyspark is needed, and nothing in it needs the JVM of the
pod, so it works over Spark Connect as well (``--spark-remote``), on any file system Spark
writes to (a local directory, HDFS, ``abfss://``).

Why it is exactly once
----------------------
The consumer moves a partition's checkpoint past a batch only once the trigger that held it
returned, that is, once the batch's directory is written. After a crash the next owner starts
the partition right after its checkpoint, so its first batch starts at the *same* first
sequence number as the batch that was written but not checkpointed, and names the same
directory. Overwriting it replaces the whole directory, whatever the two batches' sizes:

- a replay with *more* events (the receiver had more at hand) rewrites the directory with a
  superset;
- a replay with *fewer* events (another ``--batch-size`` or ``--max-wait``, or the receiver
  returned before its buffer filled: a batch is cut by whatever arrived in ``max_wait``) also
  removes the old rows beyond it; the next batch writes them again, once, in a directory of
  its own.

With ``--checkpoint-interval 0`` (the default) that is all: the handler of a partition's next
batch starts only once the previous checkpoint is durable, so at most one directory per
partition lies beyond the checkpoint. With ``--checkpoint-interval N``, several batches may
be written before the checkpoint follows: a crash then leaves directories *beyond* the one
the replay starts at, which the replay's smaller or differently cut batches would not
overwrite (the events of ``batch_first=250`` may come back as ``batch_first=200`` and ``300``:
a duplicate). So the sink also removes every directory of the partition whose first sequence
number is greater than the batch's, before it writes the first batch of each partition (and
epoch) in this process. Such directories can only be leftovers of triggers that never
checkpointed: whatever an earlier owner checkpointed ends at or before the checkpoint this
batch starts after. There is no "delete" in the DataFrame API, so a leftover is overwritten
with an empty DataFrame (a static overwrite of that one directory): it stays as a directory
with an empty Parquet file, and holds no row. This costs one Spark job listing the table, for
the partitions a process has just taken (not for every trigger).

Where it is not
---------------
- Readers get no isolation: a reader that lists the table while a trigger commits, or after
  a crash in the middle of one, may see a batch missing (a dynamic overwrite deletes a
  directory, then moves the new one in) or the rows of a batch that is about to be
  replayed. The table is exact once the trigger after the crash has returned. A transactional
  table format gives readers snapshots (Delta Lake: the same idea in one commit, an overwrite
  with ``replaceWhere`` of each partition's rows from the batch's first sequence number on).
- Nothing fences the write: an old owner that still runs its handler after its partition has
  moved (a hung pod, not a crashed one) can still write and remove directories. The runtime
  bounds this for planned moves (a revoked handler call is waited for, and past
  ``--handler-exit-seconds`` the pod process exits), not for a pod cut off from Kubernetes.
- A batch that the failure policy gives up on (parked, dead-lettered or skipped) may be in
  the table if the handler failed after the write.
- Leftovers are found by reading the table: files written by something other than this sink
  under the same root, or a schema change, break that read.
- A directory per partition and trigger: the table needs compaction now and then, like any
  streaming Parquet sink (rewrite old directories into bigger files while no consumer runs,
  or move to a table format).

Settings: ``EXACTLY_ONCE_OUTPUT`` (a directory or any Hadoop URI, default
``./exactly-once``).
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Mapping
from typing import Any, Final

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from eventhub_balancer.consumer import PartitionRange, TriggerContext

OUTPUT_ENV: Final = "EXACTLY_ONCE_OUTPUT"
#: The directory levels: the Event Hubs partition, and the first sequence number of its batch.
PARTITION_COLUMN: Final = "eh_partition"
BATCH_COLUMN: Final = "batch_first"
#: The columns stored in the Parquet files, as Spark DDL.
ROW_DDL: Final = (
    "partition STRING, sequence_number BIGINT, offset STRING, enqueued_time TIMESTAMP, "
    "partition_key STRING, body STRING, epoch BIGINT, batch_id BIGINT"
)
#: The table as read back: the rows, and the directory levels typed (not inferred: a partition
#: id such as ``0`` would otherwise come back as a number).
TABLE_DDL: Final = f"{ROW_DDL}, {PARTITION_COLUMN} STRING, {BATCH_COLUMN} BIGINT"


def output_root() -> str:
    return os.environ.get(OUTPUT_ENV, "exactly-once")


def rows(df: DataFrame) -> DataFrame:
    """The table's rows of a trigger's DataFrame, with the two directory levels."""
    return df.select(
        "partition",
        "sequence_number",
        "offset",
        "enqueued_time",
        "partition_key",
        F.col("body").cast("string").alias("body"),
        "epoch",
        "batch_id",
        F.col("partition").alias(PARTITION_COLUMN),
        F.col("first_sequence_number").alias(BATCH_COLUMN),
    )


def read_table(spark: Any, root: str | None = None) -> DataFrame:
    """The table: one row per event."""
    result: DataFrame = spark.read.schema(TABLE_DDL).parquet(root or output_root())
    return result


def batch_directory(root: str, partition: str, first_sequence_number: int) -> str:
    return (
        f"{root.rstrip('/')}/{PARTITION_COLUMN}={partition}/{BATCH_COLUMN}={first_sequence_number}"
    )


def leftovers(spark: Any, root: str, ranges: Mapping[str, PartitionRange]) -> list[tuple[str, int]]:
    """The directories of these partitions that start after their batch: (partition, first).

    An empty directory (a leftover removed before) has no row, so it is not listed again.
    """
    beyond: list[Column] = [
        (F.col(PARTITION_COLUMN) == partition) & (F.col(BATCH_COLUMN) > r.first_sequence_number)
        for partition, r in ranges.items()
    ]
    if not beyond:
        return []
    try:
        found = (
            read_table(spark, root)
            .where(functools.reduce(operator.or_, beyond))
            .select(PARTITION_COLUMN, BATCH_COLUMN)
            .distinct()
            .collect()
        )
    except AnalysisException as e:
        if "PATH_NOT_FOUND" in str(e.getCondition()):
            return []  # the first write to this root
        raise
    return sorted((str(r[PARTITION_COLUMN]), int(r[BATCH_COLUMN])) for r in found)


class Sink:
    """Writes triggers into the table under ``root`` (default: ``EXACTLY_ONCE_OUTPUT``).

    It remembers which partitions (and epochs) it has cleaned of leftovers; one per consumer
    process, like the module's :data:`SINK`.
    """

    def __init__(self, root: str | None = None) -> None:
        self.root = root
        self._cleaned: set[tuple[str, str, int]] = set()

    def write(self, df: DataFrame, context: TriggerContext) -> None:
        root = self.root or output_root()
        spark = context.spark
        fresh = {
            partition: r
            for partition, r in context.partitions.items()
            if (root, partition, r.epoch) not in self._cleaned
        }
        if fresh:
            self.remove_leftovers(spark, root, fresh)
        (
            rows(df)
            .repartition(max(1, len(context.partitions)), PARTITION_COLUMN, BATCH_COLUMN)
            .write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy(PARTITION_COLUMN, BATCH_COLUMN)
            .parquet(root)
        )
        self._cleaned.update((root, partition, r.epoch) for partition, r in fresh.items())

    @staticmethod
    def remove_leftovers(spark: Any, root: str, ranges: Mapping[str, PartitionRange]) -> None:
        """Empty every directory of these partitions that starts after the batch's first."""
        for partition, first in leftovers(spark, root, ranges):
            (
                spark.createDataFrame([], ROW_DDL)
                .write.mode("overwrite")
                .option("partitionOverwriteMode", "static")
                .parquet(batch_directory(root, partition, first))
            )


#: The consumer process's sink (a handler module is imported once per process).
SINK = Sink()


def process(df: DataFrame, context: TriggerContext) -> Any:
    """The ``--spark`` handler: returns once the trigger's rows are in the table."""
    SINK.write(df, context)
