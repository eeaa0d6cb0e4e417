"""The ``exactly_once`` example's sink: every event once in the table, whatever was replayed.

Each test plays triggers as the consumer would hand them over: a DataFrame from
``frames.to_dataframe`` over one batch per partition, and its ``TriggerContext``. A crash is
a new consumer process (a new ``Sink``: nothing remembered) whose partitions have a new
epoch and start again right after their last checkpoint; the crashed process's writes past
that checkpoint stay in the table.
"""

from __future__ import annotations

import collections
import datetime
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import contexts
from eventhub_balancer.spark import frames
from tests.support import paths, sparkarchive

T0 = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def events(partition: str, first: int, count: int) -> list[deliveries.ReceivedEvent]:
    return [
        deliveries.ReceivedEvent(
            partition=partition,
            sequence_number=n,
            offset=str(10 * n),
            enqueued_time=T0 + datetime.timedelta(milliseconds=n),
            partition_key=f"k{n % 3}",
            properties={"n": n},
            body=f"{partition}:{n}".encode(),
        )
        for n in range(first, first + count)
    ]


class Pod:
    """A consumer process: its own sink (nothing remembered from an earlier process), one
    owner epoch for its partitions, and its trigger numbers from 1."""

    def __init__(self, pipeline: ModuleType, session: Any, *, epoch: int) -> None:
        self.pipeline = pipeline
        self.session = session
        self.epoch = epoch
        self.batch_id = 0
        setattr(pipeline, "SINK", pipeline.Sink())  # noqa: B010 - a module's attribute

    def trigger(self, batches: Mapping[str, tuple[int, int]], *, attempt: int = 1) -> None:
        """One trigger: ``batches[partition] = (first sequence number, events)``."""
        if attempt == 1:
            self.batch_id += 1
        taken = [e for p, (first, count) in batches.items() for e in events(p, first, count)]
        ranges = {
            p: contexts.PartitionRange(
                partition=p,
                epoch=self.epoch,
                first_sequence_number=first,
                last_sequence_number=first + count - 1,
                size=count,
            )
            for p, (first, count) in batches.items()
        }
        context = contexts.TriggerContext(
            batch_id=self.batch_id,
            consumer="orders",
            pod=f"pod-{self.epoch}",
            partitions=ranges,
            size=len(taken),
            spark=self.session,
            attempt=attempt,
        )
        df = frames.to_dataframe(self.session, taken, batch_id=self.batch_id, ranges=ranges)
        self.pipeline.process(df, context)


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(sys, "path", [str(paths.EXAMPLES), *sys.path])
    from exactly_once import pipeline

    monkeypatch.setenv(pipeline.OUTPUT_ENV, str(tmp_path / "table"))
    monkeypatch.setattr(pipeline, "SINK", pipeline.Sink())
    return pipeline


def table(pipeline: ModuleType, session: Any) -> list[Any]:
    return list(pipeline.read_table(session).collect())


def assert_exactly_once(rows: list[Any], expected: Mapping[str, int]) -> None:
    """Every event of ``expected[partition]`` (sequence numbers 0..n-1) once, and no other."""
    seen = collections.Counter((r.partition, r.sequence_number) for r in rows)
    twice = sorted(k for k, n in seen.items() if n > 1)
    assert twice == [], f"{len(twice)} events more than once, e.g. {twice[:5]}"
    wanted = {(p, n) for p, count in expected.items() for n in range(count)}
    assert sorted(set(seen) - wanted) == []
    missing = sorted(wanted - set(seen))
    assert missing == [], f"{len(missing)} events missing, e.g. {missing[:5]}"
    for r in rows:  # each row is its event's, in the directory of the batch that held it
        assert r.body == f"{r.partition}:{r.sequence_number}"
        assert r.offset == str(10 * r.sequence_number)
        assert r.eh_partition == r.partition
        assert r.batch_first <= r.sequence_number


def epochs(rows: list[Any], partition: str, sequence_numbers: range) -> set[int]:
    return {
        r.epoch for r in rows if r.partition == partition and r.sequence_number in sequence_numbers
    }


def test_a_sequence_of_triggers(pipeline: ModuleType, spark_session: Any) -> None:
    pod = Pod(pipeline, spark_session, epoch=1)
    pod.trigger({"0": (0, 100), "1": (0, 60)})
    pod.trigger({"0": (100, 100), "1": (60, 40)})
    pod.trigger({"0": (200, 50)})  # partition 1 had nothing new
    pod.trigger({"0": (250, 10), "1": (100, 20)})
    rows = table(pipeline, spark_session)
    assert_exactly_once(rows, {"0": 260, "1": 120})
    assert {(r.partition, r.batch_first, r.batch_id) for r in rows} == {
        ("0", 0, 1),
        ("0", 100, 2),
        ("0", 200, 3),
        ("0", 250, 4),
        ("1", 0, 1),
        ("1", 60, 2),
        ("1", 100, 4),
    }


def test_a_retried_trigger_rewrites_its_directories(
    pipeline: ModuleType, spark_session: Any
) -> None:
    pod = Pod(pipeline, spark_session, epoch=1)
    pod.trigger({"0": (0, 50), "1": (0, 50)})
    pod.trigger({"0": (50, 50), "1": (50, 50)})
    pod.trigger({"0": (50, 50), "1": (50, 50)}, attempt=2)  # the handler failed after its write
    assert_exactly_once(table(pipeline, spark_session), {"0": 100, "1": 100})


def test_a_crashed_trigger_replayed_with_more_events(
    pipeline: ModuleType, spark_session: Any
) -> None:
    first = Pod(pipeline, spark_session, epoch=1)
    first.trigger({"0": (0, 100), "1": (0, 100)})  # checkpointed at 99
    first.trigger({"0": (100, 100), "1": (100, 100)})  # written, then the pod died
    second = Pod(pipeline, spark_session, epoch=2)
    second.trigger({"0": (100, 150), "1": (100, 120)})  # more had arrived meanwhile
    second.trigger({"0": (250, 50), "1": (220, 80)})
    rows = table(pipeline, spark_session)
    assert_exactly_once(rows, {"0": 300, "1": 300})
    assert epochs(rows, "0", range(100)) == {1}
    assert epochs(rows, "0", range(100, 300)) == {2}  # the killed trigger's rows were replaced


def test_a_crashed_trigger_replayed_with_fewer_events(
    pipeline: ModuleType, spark_session: Any
) -> None:
    first = Pod(pipeline, spark_session, epoch=1)
    first.trigger({"0": (0, 100), "1": (0, 100)})
    first.trigger({"0": (100, 250), "1": (100, 250)})  # 100..349 written, not checkpointed
    # The next owner cuts smaller batches (another --batch-size, or a short --max-wait).
    second = Pod(pipeline, spark_session, epoch=2)
    second.trigger({"0": (100, 40), "1": (100, 100)})
    second.trigger({"0": (140, 100), "1": (200, 100)})
    second.trigger({"0": (240, 110), "1": (300, 50)})
    rows = table(pipeline, spark_session)
    assert_exactly_once(rows, {"0": 350, "1": 350})
    assert epochs(rows, "0", range(100, 350)) == {2}


def test_a_crash_with_several_batches_past_the_checkpoint(
    pipeline: ModuleType, spark_session: Any
) -> None:
    """With --checkpoint-interval, several directories lie beyond the checkpoint: the next
    owner's differently cut batches would not overwrite them, so the sink empties them."""
    first = Pod(pipeline, spark_session, epoch=1)
    first.trigger({"0": (0, 100), "1": (0, 100)})  # partition 0 checkpointed at 99, 1 never
    first.trigger({"0": (100, 100), "1": (100, 100)})
    first.trigger({"0": (200, 100), "1": (200, 100)})
    first.trigger({"0": (300, 100)})
    second = Pod(pipeline, spark_session, epoch=2)
    second.trigger({"0": (100, 150), "1": (0, 130)})
    second.trigger({"0": (250, 60), "1": (130, 200)})
    second.trigger({"0": (310, 90), "1": (330, 70)})
    rows = table(pipeline, spark_session)
    assert_exactly_once(rows, {"0": 400, "1": 400})
    assert epochs(rows, "0", range(100)) == {1}
    assert epochs(rows, "0", range(100, 400)) == {2}
    assert epochs(rows, "1", range(400)) == {2}
    # The leftovers are still directories, without a row.
    root = Path(pipeline.output_root())
    for first_sequence_number in (200, 300):
        assert (root / "eh_partition=0" / f"batch_first={first_sequence_number}").is_dir()
    assert {r.batch_first for r in rows if r.partition == "0"} == {0, 100, 250, 310}


def test_a_restart_with_the_same_epoch(pipeline: ModuleType, spark_session: Any) -> None:
    """A container restarted in place may keep its partitions' epoch: a new process still
    removes the leftovers at its first trigger."""
    first = Pod(pipeline, spark_session, epoch=3)
    first.trigger({"0": (0, 100)})
    first.trigger({"0": (100, 100)})
    first.trigger({"0": (200, 100)})
    again = Pod(pipeline, spark_session, epoch=3)
    again.trigger({"0": (100, 30)})
    again.trigger({"0": (130, 170)})
    assert_exactly_once(table(pipeline, spark_session), {"0": 300})


def test_a_plain_dynamic_overwrite_would_duplicate(
    pipeline: ModuleType, spark_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the sink removes leftovers: the same crash without it leaves duplicates."""
    monkeypatch.setattr(pipeline.Sink, "remove_leftovers", staticmethod(lambda *_: None))
    first = Pod(pipeline, spark_session, epoch=1)
    first.trigger({"0": (0, 100)})
    first.trigger({"0": (100, 100)})
    second = Pod(pipeline, spark_session, epoch=2)
    second.trigger({"0": (0, 150)})
    second.trigger({"0": (150, 50)})
    seen = collections.Counter(r.sequence_number for r in table(pipeline, spark_session))
    assert sorted(n for n, c in seen.items() if c > 1) == list(range(100, 200))


# --- over Spark Connect: the same sink, no JVM in the consumer ---


def crash_and_replay(pipeline: ModuleType, session: Any) -> None:
    """The crash with several batches past the checkpoint, and a smaller replay."""
    first = Pod(pipeline, session, epoch=1)
    first.trigger({"0": (0, 100), "1": (0, 100)})
    first.trigger({"0": (100, 100), "1": (100, 100)})
    first.trigger({"0": (200, 100)})
    second = Pod(pipeline, session, epoch=2)
    second.trigger({"0": (100, 30), "1": (100, 150)})
    second.trigger({"0": (130, 170), "1": (250, 50)})
    assert_exactly_once(table(pipeline, session), {"0": 300, "1": 300})


def main() -> None:
    """``python -m tests.spark.test_exactly_once REMOTE DIRECTORY``: `crash_and_replay` over
    a Spark Connect session, in a process of its own (a Connect client for good once it
    opened one, which the test session's classic SparkSession must not become)."""
    from eventhub_balancer.spark import sessions

    remote, directory = sys.argv[1:3]
    sys.path.insert(0, str(paths.EXAMPLES))
    from exactly_once import pipeline

    os.environ[pipeline.OUTPUT_ENV] = directory
    session = sessions.build_session(remote=remote)
    assert ".connect." in type(session).__module__, type(session)
    crash_and_replay(pipeline, session)
    print("exactly once over Spark Connect")


@pytest.mark.integration
def test_over_spark_connect(spark_connect_url: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.test_exactly_once", spark_connect_url, str(tmp_path)],
        cwd=paths.REPOSITORY,
        env=sparkarchive.child_environment(os.environ),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("exactly once over Spark Connect")
    assert (tmp_path / "eh_partition=0" / "batch_first=200").is_dir()  # emptied, not deleted


if __name__ == "__main__":
    main()
