"""eventhub_balancer.consumer.testing runs a handler as the runtime does, without Azure."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.consumer import (
    BatchContext,
    Event,
    PartitionsFailed,
    TriggerContext,
    testing,
)
from tests.support import paths


def test_events_are_one_partition_in_sequence_order() -> None:
    made = testing.events([b"raw", "text", {"id": 1}], partition="4", first_sequence_number=9)
    assert [e.body for e in made] == [b"raw", b"text", b'{"id": 1}']
    assert [e.sequence_number for e in made] == [9, 10, 11]
    assert {e.partition for e in made} == {"4"}
    assert made[0].enqueued_time < made[1].enqueued_time


def test_a_plain_handler_runs_in_a_thread_and_sees_a_realistic_context() -> None:
    seen: list[tuple[BatchContext, str]] = []

    def handler(events: Sequence[Event], context: BatchContext) -> None:
        seen.append((context, threading.current_thread().name))

    outcome = testing.run(
        handler, testing.events(["a", "b"], first_sequence_number=5), epoch=3, attempt=2
    )
    assert outcome.checkpointed
    ((context, thread),) = seen
    assert (context.first_sequence_number, context.last_sequence_number, context.size) == (5, 6, 2)
    assert (context.epoch, context.attempt) == (3, 2)
    assert thread != threading.main_thread().name


async def test_an_async_handler_is_awaited_on_the_callers_loop() -> None:
    calls: list[int] = []

    async def handler(events: Sequence[Event], context: BatchContext) -> None:
        calls.append(context.size)

    outcome = await testing.run_async(handler, testing.events(["a"]))
    assert outcome.checkpointed
    assert calls == [1]


def test_a_failure_is_reported_not_raised() -> None:
    def handler(events: Sequence[Event], context: BatchContext) -> None:
        raise RuntimeError("sink down")

    outcome = testing.run(handler, testing.events(["a"], partition="2"))
    assert not outcome.checkpointed
    assert str(outcome.error) == "sink down"
    assert outcome.failed_partitions == {"2"}


def test_a_handler_of_the_wrong_shape_is_refused_as_at_start() -> None:
    with pytest.raises(errors.InvalidInput, match="takes \\(events\\)"):
        testing.run(lambda events: None, testing.events(["a"]))


def test_a_batch_is_never_empty_nor_mixed() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        testing.batch_context([])
    mixed = testing.events(["a"], partition="0") + testing.events(["b"], partition="1")
    with pytest.raises(ValueError, match="one partition"):
        testing.batch_context(mixed)


class ArrowSession:
    """Stands in for a SparkSession: hands back the Arrow table the runtime would convert."""

    def createDataFrame(self, table: Any, schema: Any) -> Any:  # Spark's name
        return table


def test_a_spark_handler_gets_a_trigger_over_its_partitions() -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    seen: list[tuple[Any, TriggerContext]] = []

    def handler(df: Any, context: TriggerContext) -> None:
        seen.append((df, context))
        raise PartitionsFailed({"1": "bad row"})

    batch = testing.events(["a", "b"], partition="0") + testing.events(
        ["c"], partition="1", first_sequence_number=40
    )
    outcome = testing.run_spark(handler, batch, spark=ArrowSession(), epochs={"1": 5}, batch_id=3)
    ((table, context),) = seen
    assert table.num_rows == 3
    assert context.batch_id == 3
    assert context.size == 3
    assert context.partitions["1"].epoch == 5
    assert context.partitions["1"].first_sequence_number == 40
    assert outcome.failed_partitions == {"1"}


def test_the_example_projects_tests_pass() -> None:
    """examples/orders/tests/test_pipeline.py, run as its docstring says."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/orders"],
        cwd=paths.REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    # A newcomer's first run prints no warning (pytest-asyncio's, once).
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_revoked_plain_handler_is_reported_revoked_once_its_thread_ends() -> None:
    import time

    def slow(events: Sequence[Event], context: BatchContext) -> None:
        time.sleep(0.3)

    outcome = testing.run(slow, testing.events(["a"]), revoke_after=0.05)
    assert outcome.revoked
    assert not outcome.checkpointed
