"""A handler project of a user's own, typed as docs/consumer.md shows, passes ``mypy --strict``
against the installed package (its ``py.typed``), outside this repository's mypy settings."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark")  # the Spark handler's types come from the spark extra

PIPELINE = """
from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from eventhub_balancer import testing
from eventhub_balancer.consumer import (
    BatchContext,
    Event,
    Handler,
    PartitionsFailed,
    SparkHandler,
    TriggerContext,
)


def handle(key: str | None, body: bytes) -> None: ...


def process(events: Sequence[Event], context: BatchContext) -> None:
    for event in events:
        handle(event.partition_key, event.body)


async def process_async(events: Sequence[Event], context: BatchContext) -> None:
    for event in events:
        handle(event.partition_key, event.body)


def spark_process(df: DataFrame, context: TriggerContext) -> None:
    # "context.spark is the SparkSession (typed pyspark.sql.SparkSession)"
    context.spark.sql("SELECT 1").collect()
    for partition, share in context.partitions.items():
        if share.size > 1000:
            raise PartitionsFailed({partition: "too big"})


handler: Handler = process
also: Handler = process_async
spark_handler: SparkHandler = spark_process


def test_a_batch_is_processed() -> None:
    batch = testing.events([{"id": 1, "amount": 10}], partition="3", first_sequence_number=100)
    outcome = testing.run(process, batch, epoch=7)
    assert outcome.checkpointed
    assert outcome.failed_partitions == frozenset()
"""


def test_the_documented_handlers_pass_mypy_strict_in_a_project_of_their_own(
    tmp_path: Path,
) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "pipeline.py").write_text(textwrap.dedent(PIPELINE))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "mypkg"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
