"""A partition's restart backoff counts the failures in a row, not every failure of its life.

A worker that failed starts again after 1 s, then 2, 4, ... up to 30 s while it goes on
failing. A partition that then ran well for a long time and fails once more starts a new row:
it used to wait the 30 s of failures long past, its lag growing meanwhile, and to be reported
at their attempt count.

On fake loop time (looptime) against the in-memory fakes of `tests.support.consumerfakes`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.consumer import restarts
from tests.consumer.test_runtime import running
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime


class FlakyStore(consumerfakes.FakeStoreHandle):
    """A store that refuses, at once, the next ``fences`` fences and ``updates`` updates."""

    def __init__(self, store: consumerfakes.FakeStore, owner: str) -> None:
        super().__init__(store, owner)
        self.fences = 0
        self.updates = 0

    async def fence(
        self, partition: str, epoch: int, *, start: Any
    ) -> consumerfakes.FakeCheckpoint:
        if self.fences:
            self.fences -= 1
            raise errors.CheckpointStoreUnreachable("HTTP 503 ServerBusy")
        return await super().fence(partition, epoch, start=start)

    async def update(
        self, partition: str, *, offset: str, sequence_number: int
    ) -> consumerfakes.FakeCheckpoint:
        if self.updates:
            self.updates -= 1
            raise errors.CheckpointStoreUnreachable("HTTP 503 ServerBusy")
        return await super().update(partition, offset=offset, sequence_number=sequence_number)


def delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The backoffs said by the failure lines so far, in order."""
    said = [r.getMessage() for r in caplog.records if r.name == restarts.logger.name]
    return [float(m) for line in said for m in re.findall(r"restarting in ([0-9.]+) s", line)]


@pytest.mark.parametrize(
    ("ran_s", "then"),
    [
        # Ran well for ten minutes: a new row (it was 30.0, the old row's cap).
        (restarts.STREAK_S, [restarts.RESTART_BACKOFF_S]),
        # For less: the row goes on (a batch whose checkpoint is refused each time backs off,
        # and does not restart every second for ever).
        (restarts.STREAK_S - 60, [30.0]),
    ],
)
async def test_a_failure_long_after_the_last_starts_a_new_row(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
    ran_s: float,
    then: list[float],
) -> None:
    caplog.set_level(logging.INFO, logger=restarts.logger.name)
    store = FlakyStore(fake_store, "pod-a")
    store.fences = 6
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        fake_hub.append("0", 3)
        await consumerfakes.eventually(lambda: len(recorder.done) == 3, within=120)
        # In a row: each failure waits twice as long as the one before, up to the cap.
        row = [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
        assert delays(caplog) == row
        await consumerfakes.eventually(lambda: "0" not in source.reports, within=5)

        await asyncio.sleep(ran_s)  # it runs well meanwhile
        store.updates = 1
        fake_hub.append("0", 2)  # handled; its checkpoint write is refused: the worker fails
        await consumerfakes.eventually(lambda: len(delays(caplog)) == 7, within=30)
        assert delays(caplog) == row + then
        assert consumer.reports()["0"].attempts == (1 if then == [1.0] else 7)
        # Back within the backoff it said.
        await consumerfakes.eventually(lambda: fake_store.history["0"][-1] == 4, within=then[0] + 2)


def test_the_row_is_counted_from_the_restart() -> None:
    rows = restarts.Restarts()
    error = errors.CheckpointStoreUnreachable("HTTP 503")
    assert rows.failed("0", error, epoch=1, now=0.0).failures == 1  # starts again at 1
    assert rows.failed("0", error, epoch=1, now=5.0).failures == 2  # at 7
    just_short = 7.0 + restarts.STREAK_S - 0.5
    assert rows.failed("0", error, epoch=1, now=just_short).failures == 3
    ran_long = rows.entries["0"].not_before + restarts.STREAK_S
    assert rows.failed("0", error, epoch=1, now=ran_long).failures == 1
    assert rows.failed("1", error, epoch=1, now=10_000.0).failures == 1  # its own row


def test_only_a_restart_in_an_outage_takes_up_quietly() -> None:
    rows = restarts.Restarts()
    refused = errors.EventHubUnreachable("refused")
    assert rows.take_up_level("0", now=0.0) == logging.INFO  # a first take-up
    rows.failed("0", refused, epoch=1, now=0.0)  # alone: said, and so is its restart
    assert rows.take_up_level("0", now=1.0) == logging.INFO
    rows.failed("1", refused, epoch=1, now=0.5)  # together: both restarts are quiet
    rows.failed("0", refused, epoch=1, now=1.5)
    assert rows.take_up_level("1", now=1.5) == logging.DEBUG
    assert rows.take_up_level("0", now=3.5) == logging.DEBUG
    # Given back long after its failure (taken away meanwhile): a take-up like a first one.
    assert rows.take_up_level("1", now=1.5 + restarts.STREAK_S) == logging.INFO
    rows.failed("2", errors.CheckpointStoreUnreachable("503"), epoch=1, now=2.0)
    assert rows.take_up_level("2", now=3.0) == logging.INFO  # its own failure, said alone


def four_fail_together(
    caplog: pytest.LogCaptureFixture, error: Callable[[int], BaseException]
) -> tuple[restarts.Restarts, list[str]]:
    """Partitions 0-3 failing 0.1 s apart, each with ``error(partition)``: the restarts, and
    the lines said at ERROR."""
    rows = restarts.Restarts()
    caplog.set_level(logging.DEBUG, logger=restarts.__name__)
    for p in range(4):
        rows.failed(str(p), error(p), epoch=1, now=0.1 * p)
    return rows, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_store_that_refuses_the_pod_is_one_cause_said_for_all_its_partitions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A storage key rotated to a wrong one failed every partition's checkpoint: 32 ERROR
    lines a round on a 32-partition pod, each naming its own blob, and reports whose text
    differed from partition to partition (so the operator posted an Event for each few) and
    lost what to check past the status's 200 characters."""
    cause = (
        "the blob service forbids it (HTTP 403 AuthorizationFailure (HttpResponseError)): "
        "the account refused this client: check that the key is right"
    )

    def refused(p: int) -> errors.CheckpointStoreRefused:
        operation = f"checkpoint update to sequence number {9 + p} of partition {p} (h/c/{p})"
        return errors.CheckpointStoreRefused(f"{operation}: {cause}", cause=cause)

    rows, said = four_fail_together(caplog, refused)
    assert {r.error for r in rows.entries.values()} == {cause}
    assert [line.split(":")[0] for line in said] == [
        "partition 0",
        "2 partitions refused by the checkpoint store together, each restarting with backoff, last",
        "4 partitions refused by the checkpoint store together, each restarting with backoff, last",
    ]
    assert said[-1].count("partition 3 (h/c/3)") == 1  # the last one's own words, in full


def test_a_store_that_does_not_answer_is_one_cause_said_for_all_its_partitions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Azurite stopped under a pod of 16 partitions: each one's fence gave up after its 20 s
    budget and said so at ERROR, 16 lines every 30 s (273 lines in two minutes), and each
    reported its own blob, so the operator's condition and Events named each partition with
    the same error."""
    cause = "gave up on the checkpoint store, a call's budget of 20 s spent; last error: timed out"

    def unanswered(p: int) -> errors.CheckpointStoreUnreachable:
        operation = f"checkpoint fence with epoch 1 of partition {p} (h/c/{p})"
        error = errors.CheckpointStoreUnreachable(
            f"{operation}: gave up after 3 attempt(s) over 20.{p} s (budget 100 attempts, 20 s); "
            "last error: timed out"
        )
        error.cause = cause
        return error

    rows, said = four_fail_together(caplog, unanswered)
    assert {r.error for r in rows.entries.values()} == {cause}
    assert [line.split(":")[0] for line in said] == [
        "partition 0",
        "2 partitions failed on the checkpoint store together, each restarting with backoff, last",
        "4 partitions failed on the checkpoint store together, each restarting with backoff, last",
    ]
    assert said[-1].count("partition 3 (h/c/3)") == 1  # the last one's own words, in full
    assert rows.take_up_level("3", now=1.0) == logging.DEBUG  # one more attempt in the outage
