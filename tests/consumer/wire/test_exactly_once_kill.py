"""A Spark consumer killed mid-trigger: the ``exactly_once`` example still has every event once.

The real CLI in child processes (``ehb consume --spark --assignment-file``, as in
``test_assignment_file.py``), the Event Hubs emulator and Azurite. A backlog waits in 4
partitions. The first process runs the example's pipeline through a handler that, on its
second trigger, writes the table and then sleeps (``exactly_once_killable``): the test kills
it there (SIGKILL: the trigger's rows are in the table, its checkpoints are not). A second
process takes the partitions with epoch 2 and the plain example handler, with smaller batches
than the first, so that its replays are cut differently. Once the table holds every event,
each must be in it once, and the killed trigger's rows must have been rewritten by epoch 2.

Two runs: checkpoints after every trigger (one written batch per partition past the
checkpoint at the kill), and ``--checkpoint-interval`` so long that none is written (every
written batch is past it, and the second process's batches overwrite some of them and must
empty the rest).
"""

from __future__ import annotations

import asyncio
import collections
import json
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support import consumerprocesses, paths
from tests.support.consumerfakes import configmap
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.operator import wait_for
from tests.support.fixtures.spark import SMALL_DRIVER_ARGS, spark_unavailable

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = ("0", "1", "2", "3")
#: Two of the first process's triggers (the second one killed) and a little more: the second
#: process's replays of 100 then cross the end of what the first wrote (450-549 after a
#: checkpoint at 249), and with no checkpoint they cross the killed trigger's start. Every
#: event past that costs the second process triggers and proves nothing more.
PER_PARTITION = 550
TOTAL = PER_PARTITION * len(PARTITIONS)
#: The first process cuts batches of 250, the second of 100: its replays are smaller.
FIRST_BATCH_SIZE = 250
SECOND_BATCH_SIZE = 100
#: The first process's session start and two triggers; the second's start and the backlog.
KILL_WAIT_S = 90.0
DRAIN_WAIT_S = 120.0
SPARK_ARGS = SMALL_DRIVER_ARGS


class Run:
    """The files of one run, and how to start a consumer process on them."""

    def __init__(self, tmp_path: Path, *, emulator: Any, azurite: Any, container: str) -> None:
        self.tmp_path = tmp_path
        self.cs = emulator.connection_string()
        self.azurite = azurite
        self.container = container
        self.table = tmp_path / "table"
        self.assignment = tmp_path / "assignment.json"
        self.marker = tmp_path / "killed-trigger.json"
        self.records = tmp_path / "records"
        self.records.mkdir()

    def assign(self, generation: int, epoch: int) -> None:
        owned = {p: (epoch, "owned") for p in PARTITIONS}
        body = configmap(generation, owned, checkpointContainer=self.container)
        temporary = self.assignment.with_suffix(".tmp")
        temporary.write_text(json.dumps(body))
        temporary.replace(self.assignment)

    def start(self, name: str, handler: str, *flags: str) -> subprocess.Popen[bytes]:
        env = consumerprocesses.file_consumer_env(
            self.tmp_path,
            eventhub=self.cs,
            blob=self.azurite.connection_string,
            extra={
                "EHB_TEST_RECORD_DIR": str(self.records),
                "EHB_TEST_MARKER": str(self.marker),
                "EXACTLY_ONCE_OUTPUT": str(self.table),
            },
        )
        command = consumerprocesses.consume_command(
            handler,
            *SPARK_ARGS,
            "--pod-name",
            "pod-a",
            "--assignment-file",
            str(self.assignment),
            "--ack-file",
            str(self.tmp_path / f"{name}.acks.json"),
            *flags,
            handler_paths=(paths.HANDLERS, paths.EXAMPLES),
            shutdown_timeout=20,
        )
        with open(self.tmp_path / f"{name}.log", "wb") as out:
            return subprocess.Popen(command, env=env, stdout=out, stderr=out)

    def rows(self) -> list[tuple[str, int, int, int]] | None:
        """The table's (partition, sequence_number, epoch, batch_first), or None while a write
        moves files under the reader."""
        import pyarrow.dataset as ds

        if not self.table.exists():
            return []
        try:
            dataset = ds.dataset(self.table, format="parquet", partitioning="hive")
            columns = dataset.to_table(
                columns=["partition", "sequence_number", "epoch", "batch_first"]
            ).to_pydict()
        except (OSError, ValueError):
            return None
        return list(
            zip(
                columns["partition"],
                columns["sequence_number"],
                columns["epoch"],
                columns["batch_first"],
                strict=True,
            )
        )

    def checkpoints(self) -> dict[str, int]:
        return asyncio.run(
            consumerprocesses.checkpoint_positions(self.azurite.connection_string, self.container)
        )

    def logs(self) -> Iterator[str]:
        for log in sorted(self.tmp_path.glob("*.log")):
            yield f"--- {log.name}\n" + log.read_text(errors="replace")[-3000:]


def stop(process: subprocess.Popen[bytes], *, sig: int = signal.SIGKILL) -> int:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            return process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=10)


def in_range(rows: list[tuple[str, int, int, int]], partition: str, first: int, last: int) -> Any:
    return [r for r in rows if r[0] == partition and first <= r[1] <= last]


@pytest.mark.parametrize(
    "checkpoint_interval",
    [pytest.param("0", id="checkpoint-every-trigger"), pytest.param("3600", id="no-checkpoint")],
)
def test_killed_mid_trigger_every_event_once(
    checkpoint_interval: str,
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    tmp_path: Path,
) -> None:
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    run = Run(
        tmp_path,
        emulator=consumer_emulator,
        azurite=azurite,
        container=blob_container.container_name,
    )
    asyncio.run(send_events(run.cs, "orders", dict.fromkeys(PARTITIONS, PER_PARTITION)))
    run.assign(1, epoch=1)
    first = run.start(
        "first",
        "exactly_once_killable:process",
        "--batch-size",
        str(FIRST_BATCH_SIZE),
        "--checkpoint-interval",
        checkpoint_interval,
    )
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(
            lambda: run.marker.exists() or first.poll() is not None,
            timeout=KILL_WAIT_S,
            what="the first process in its second trigger",
        )
        assert first.poll() is None, "the first process ended early"
        stop(first)
        killed = json.loads(run.marker.read_text())
        assert killed["batch_id"] == 2
        killed_ranges: Mapping[str, Mapping[str, int]] = killed["ranges"]
        assert killed_ranges, killed
        # The worst case: the killed trigger's rows are in the table, its checkpoints are not.
        before = run.rows()
        assert before is not None
        at_kill = run.checkpoints()
        for partition, r in killed_ranges.items():
            assert at_kill.get(partition, -1) < r["first"], (partition, at_kill, r)
            written = in_range(before, partition, r["first"], r["last"])
            assert len(written) == r["size"]
            assert {epoch for _, _, epoch, _ in written} == {1}
        if checkpoint_interval != "0":
            # Only the fence's: both triggers were written past the checkpoints.
            assert set(at_kill.values()) <= {-1}, at_kill

        run.assign(2, epoch=2)
        second = run.start(
            "second", "exactly_once.pipeline:process", "--batch-size", str(SECOND_BATCH_SIZE)
        )

        def drained() -> bool:
            rows = run.rows()
            return rows is not None and len({(p, n) for p, n, _, _ in rows}) >= TOTAL

        wait_for(
            lambda: drained() or second.poll() is not None,
            timeout=DRAIN_WAIT_S,
            what="every event in the table",
        )
        assert second.poll() is None, "the second process ended early"
        assert stop(second, sig=signal.SIGTERM) == 0
    finally:
        stop(first)
        if second is not None:
            stop(second)
        print("\n".join(run.logs()))

    rows = run.rows()
    assert rows is not None
    seen = collections.Counter((p, n) for p, n, _, _ in rows)
    twice = sorted(k for k, n in seen.items() if n > 1)
    assert twice == [], f"{len(twice)} events in the table more than once, e.g. {twice[:5]}"
    assert set(seen) == {(p, n) for p in PARTITIONS for n in range(PER_PARTITION)}
    # The killed trigger was replayed: epoch 2 rewrote every row it had written.
    for partition, r in killed_ranges.items():
        rewritten = in_range(rows, partition, r["first"], r["last"])
        assert {epoch for _, _, epoch, _ in rewritten} == {2}, partition
    # The first trigger's rows stay epoch 1's where it was checkpointed, and only there.
    checkpointed = {(p, n) for p, last in at_kill.items() for n in range(last + 1)}
    assert {(p, n) for p, n, epoch, _ in rows if epoch == 1} == checkpointed
    assert run.checkpoints() == dict.fromkeys(PARTITIONS, PER_PARTITION - 1)
