"""A consumer group (or hub) that does not exist, as the pod's runtime meets it: one ERROR
line for all its partitions, restarts paced by the backoff, every partition reported failing
with the reason, the pod still Ready; and processing starts once the group exists.

Over the in-memory fakes, on fake loop time.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import sharedlines
from eventhub_balancer.consumer import restarts
from tests.consumer import test_runtime
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

MISSING = errors.ConsumerGroupNotFound(
    "consumer group 'analytics' of Event Hub 'orders' in shop.servicebus.windows.net does not "
    "exist: create it, or fix spec.eventHub.consumerGroup"
)
PARTITIONS = {str(p): (1, "owned") for p in range(8)}


def loud(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What a pod logs at WARNING and above."""
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def take_ups(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """The partitions' take-up lines ("processing with epoch"): at INFO, and at DEBUG."""
    lines = [r for r in caplog.records if ": processing with epoch " in r.getMessage()]
    return (
        [r.getMessage() for r in lines if r.levelno >= logging.INFO],
        [r.getMessage() for r in lines if r.levelno < logging.INFO],
    )


async def test_a_missing_consumer_group_is_one_error_line_and_a_paced_backoff(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_hub.missing = MISSING
    for partition in PARTITIONS:
        fake_hub.append(partition, 2)
    recorder = consumerfakes.Recorder()
    async with test_runtime.running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        await consumerfakes.eventually(
            lambda: len(source.reports) == len(PARTITIONS), what="every partition reported"
        )
        assert {r.state for r in source.reports.values()} == {"failing"}
        assert {r.error for r in source.reports.values()} == {str(MISSING)}
        # The pod stays Ready: the operator says what is wrong (its status), the pod reports.
        assert consumer.ready()[0] is True

        await asyncio.sleep(200)
        said = loud(caplog)
        assert [r.levelname for r in said] == ["ERROR"]
        assert said[0].getMessage().startswith(str(MISSING))
        # Paced: 1, 2, 4, 8, 16 s, then every 30 s (and a tick each): about 10 opens each in
        # 200 s, where the reopen loop opened a link every few seconds forever.
        opened = [sum(1 for r in fake_hub.receivers if r.partition == p) for p in PARTITIONS]
        assert max(opened) <= 11
        assert min(opened) >= 8

        await asyncio.sleep(restarts.REPEAT_SECONDS)
        assert len(loud(caplog)) == 2  # said again once while it lasts
        said, quiet = take_ups(caplog)  # each restart's take-up is one more attempt: DEBUG
        assert len(said) == len(PARTITIONS)
        assert len(quiet) >= sum(opened) - len(PARTITIONS)

        fake_hub.missing = None  # someone created the group
        await consumerfakes.eventually(
            lambda: len(recorder.done) == 2 * len(PARTITIONS),
            within=restarts.RESTART_BACKOFF_MAX_S + 2,
            what="every partition processing",
        )
        await consumerfakes.eventually(lambda: not source.reports, what="the reports cleared")


async def test_an_event_hubs_that_no_partition_reaches_is_said_in_a_few_lines(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each partition's failure names it, so each could be its own trouble: the first is said
    # as it comes, then one line for those failing together, again as their number doubles.
    # Before, every partition said its failure at ERROR at every restart: 8 lines after 1, 2,
    # 4, 8 and 16 s, then every 30 s (80 in 200 s).
    caplog.set_level(logging.DEBUG)
    fake_hub.missing = errors.EventHubUnreachable("refused")
    recorder = consumerfakes.Recorder()
    async with test_runtime.running(fake_hub, fake_store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        await asyncio.sleep(200)
        assert {r.error for r in source.reports.values()} == {"refused"}
        assert len(source.reports) == len(PARTITIONS)
        assert consumer.ready()[0] is True
        said = [r.getMessage() for r in loud(caplog)]
        assert said[0] == "partition 0: epoch 1 failed: refused; restarting in 1.0 s"
        together = [m.split(" partitions failed on Event Hubs together")[0] for m in said[1:]]
        assert together == ["2", "4", "8"]
        assert said[-1].startswith(
            "8 partitions failed on Event Hubs together, each restarting with backoff, last: "
            "partition 7: "
        )
        failures = [r for r in caplog.records if r.getMessage().startswith("partition 5: epoch")]
        assert len(failures) >= 5  # each one still at DEBUG
        # "processing" at INFO as each partition first took its partition up, and for partition
        # 0's restart, whose failure was said alone; the others' restarts say it at DEBUG.
        said, quiet = take_ups(caplog)
        assert len(said) == len(PARTITIONS) + 1, said
        assert len(quiet) >= 4 * len(PARTITIONS)

        await asyncio.sleep(sharedlines.REPEAT_S)
        assert len(loud(caplog)) == 5  # said again once while it lasts

        fake_hub.missing = None  # reachable again
        await consumerfakes.eventually(
            lambda: not source.reports, within=restarts.RESTART_BACKOFF_MAX_S + 2, what="cleared"
        )


async def test_a_failure_of_one_partition_is_still_logged_per_partition(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    store = fake_store.handle("pod-a")
    store.fail_fences = 2
    recorder = consumerfakes.Recorder()
    async with test_runtime.running(fake_hub, store, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: len(store.fence_times) == 3, what="2 restarts")
    # A partition failing alone: the restart that took it up (its fences failed twice) says
    # so at INFO.
    assert [len(lines) for lines in take_ups(caplog)] == [1, 0]
    # One line for each failure, with its restart's backoff.
    errors_logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors_logged == [
        "partition 0: epoch 1 failed: injected; restarting in 1.0 s",
        "partition 0: epoch 1 failed: injected; restarting in 2.0 s",
    ]
    assert not [
        r
        for r in caplog.records
        if "failed: injected" in r.getMessage() and r.levelno < logging.ERROR
    ]
