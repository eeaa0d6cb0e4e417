"""A consumer group deleted while a pod reads it, on the Event Hubs emulator and Azurite.

What Event Hubs does to the open receive links when their group is deleted could not be
established; the links are detached here (``amqp:link:detach-forced``, as the service does on
its own), and every link attached afterwards is refused with ``amqp:not-found``, as Event Hubs
refuses one on a group that does not exist.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from eventhub_balancer.consumer import partitions
from tests.support.consumerfakes import Recorder, eventually
from tests.support.fixtures.consumer import reading_pod, send_events

BATCH = partitions.BatchSettings(batch_size=100, max_wait=0.1, retry_backoff=0.05)


async def test_a_group_deleted_under_a_reading_pod_is_said_once_and_read_again_once_back(
    consumer_emulator: Any, azurite: Any, blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cs = consumer_emulator.connection_string()
    consumer_emulator.create_consumer_group("orders", "analytics")
    await send_events(cs, "orders", {p: 5 for p in "0123"})
    recorder = Recorder()
    async with reading_pod(
        cs,
        azurite,
        blob_container,
        recorder,
        batch=BATCH,
        owned={p: (1, "owned") for p in "0123"},
        consumerGroup="analytics",
    ) as (_, source):
        await eventually(lambda: len(recorder.done) == 20, within=20, what="all 20 events")
        await asyncio.sleep(1.5)  # the checkpoints of the last batches are written
        caplog.set_level(logging.INFO)
        caplog.clear()
        detached = consumer_emulator.delete_consumer_group(
            "orders", "analytics", detach_condition="amqp:link:detach-forced"
        )
        assert detached == 4
        await eventually(lambda: len(source.reports) == 4, within=30, what="4 reports")
        await asyncio.sleep(4)  # a few rounds of restarts (1, 2 s)
        assert {r.state for r in source.reports.values()} == {"failing"}
        assert all("consumer group 'analytics'" in r.error for r in source.reports.values())
        said = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert "consumer group 'analytics' of Event Hub 'orders'" in said[0].getMessage()

        consumer_emulator.create_consumer_group("orders", "analytics")
        await send_events(cs, "orders", {p: 1 for p in "0123"})
        await eventually(lambda: len(recorder.done) == 24, within=40, what="the 4 new events")
        await eventually(lambda: not source.reports, within=10, what="the reports cleared")
    assert sorted(recorder.done) == sorted((p, n) for p in "0123" for n in range(6))
