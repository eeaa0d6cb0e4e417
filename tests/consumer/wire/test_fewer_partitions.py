"""An Event Hub deleted and created again with fewer partitions (4, then 2) under a pod that
still owns the old partitions 2 and 3, on the Event Hubs emulator and Azurite.

Event Hubs refuses a receive link on a partition id the hub does not have with
``com.microsoft:argument-out-of-range`` (its words: the partition is invalid for a sender or
receiver, and must be between 0 and the last one): the same condition as some refused start
positions. The operator keeps partitions it assigned that a listing lacks (it never revokes
on a listing), and the pod said that Event Hubs "refused the receive position", which sent
people to reset checkpoints, which cannot help.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from eventhub_balancer.adapters import checkpointing
from eventhub_balancer.consumer import partitions
from eventhub_balancer.contracts import checkpointblobs
from tests.support.consumerfakes import Recorder, eventually
from tests.support.fixtures.consumer import reading_pod, send_events

BATCH = partitions.BatchSettings(batch_size=100, max_wait=0.1, retry_backoff=0.05)


@pytest.mark.parametrize("checkpointed", [False, True])
async def test_partitions_the_recreated_hub_lacks_are_said_once_as_missing(
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    caplog: pytest.LogCaptureFixture,
    checkpointed: bool,
) -> None:
    consumer_emulator.create_hub("pairs", 2)  # was 4 partitions, created again with 2
    cs = consumer_emulator.connection_string()
    if checkpointed:  # the old hub's checkpoints, kept in the container
        old = checkpointing.CheckpointStore(
            blob_container,
            fully_qualified_namespace="local.servicebus.windows.net",
            eventhub_name="pairs",
            consumer_group="$Default",
            owner_id="old-pod",
        )
        for partition in "0123":
            await old.fence(
                partition, 1, start=checkpointblobs.Position(offset="-1", sequence_number=-1)
            )
    await send_events(cs, "pairs", {"0": 3, "1": 3})
    caplog.set_level(logging.INFO)
    recorder = Recorder()
    async with reading_pod(
        cs,
        azurite,
        blob_container,
        recorder,
        batch=BATCH,
        owned={p: (2, "owned") for p in "0123"},
        eventHubName="pairs",
    ) as (_, source):
        await eventually(lambda: len(recorder.done) == 6, within=20, what="events of 0 and 1")
        await eventually(lambda: len(source.reports) == 2, within=20, what="2 reports")
        await asyncio.sleep(4)  # a few rounds of restarts (1, 2 s)
        assert set(source.reports) == {"2", "3"}
        assert {r.state for r in source.reports.values()} == {"failing"}
        for partition, report in source.reports.items():
            assert f"partition {partition} does not exist" in report.error, report.error
            assert "checkpoint reset cannot mend it" in report.error, report.error
            assert "position" not in report.error, report.error
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not any("refused the receive position" in line for line in said), said
        missing = [line for line in said if "does not exist" in line]
        assert missing, said
        # Event Hubs' words, whole and once, without its tracking ids.
        assert all(line.count("It should be between 0 and 1.") == 1 for line in missing), said
        assert not any("TrackingId" in line for line in said), said

        # Nothing on the pod's side mends it; the hub having the partitions again does.
        consumer_emulator.add_partitions("pairs", 4)
        await send_events(cs, "pairs", {"2": 2, "3": 2})
        await eventually(lambda: len(recorder.done) == 10, within=40, what="events of 2 and 3")
        await eventually(lambda: not source.reports, within=10, what="the reports cleared")
