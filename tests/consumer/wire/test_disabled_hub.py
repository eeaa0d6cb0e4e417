"""An Event Hub whose status was set to Disabled, on the Event Hubs emulator and Azurite.

Event Hubs refuses a receiver on a disabled hub with ``com.microsoft:entity-disabled``; the
emulator does the same (`disable_hub`). Nobody receives until its owner sets it Active again.
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


async def test_a_disabled_hub_is_said_once_and_read_once_active_again(
    consumer_emulator: Any, azurite: Any, blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {p: 5 for p in "0123"})
    consumer_emulator.disable_hub("orders")
    caplog.set_level(logging.INFO)
    recorder = Recorder()
    async with reading_pod(
        cs, azurite, blob_container, recorder, batch=BATCH, owned={p: (1, "owned") for p in "0123"}
    ) as (_, source):
        await eventually(lambda: len(source.reports) == 4, within=20, what="4 reports")
        await asyncio.sleep(4)  # a few rounds of restarts (1, 2 s)
        assert {r.state for r in source.reports.values()} == {"failing"}
        assert all("is disabled" in r.error for r in source.reports.values()), [
            r.error for r in source.reports.values()
        ]
        said = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert "Event Hub 'orders'" in said[0].getMessage()
        assert "is disabled" in said[0].getMessage()

        consumer_emulator.disable_hub("orders", False)
        await eventually(lambda: len(recorder.done) == 20, within=40, what="all 20 events")
        await eventually(lambda: not source.reports, within=10, what="the reports cleared")
