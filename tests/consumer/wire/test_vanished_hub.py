"""An Event Hub deleted for good (or a consumer group deleted) under a consumer that has
checkpoints, on the Event Hubs emulator and Azurite.

A partition that had a checkpoint asks Event Hubs where the partition ends at each take-up
(`consumer.connections`). Event Hubs answers that management request for a hub it no longer
has with status 404, and refuses the receive link with ``amqp:not-found``.
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
from tests.support.fixtures.consumer import reading_pod

BATCH = partitions.BatchSettings(batch_size=100, max_wait=0.1, retry_backoff=0.05)


def store(container: Any, hub: str, owner: str) -> checkpointing.CheckpointStore:
    return checkpointing.CheckpointStore(
        container,
        fully_qualified_namespace="local.servicebus.windows.net",
        eventhub_name=hub,
        consumer_group="$Default",
        owner_id=owner,
    )


async def test_a_deleted_hub_with_checkpoints_is_said_once_as_missing(
    consumer_emulator: Any, azurite: Any, blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The hub 'payments' had been read up to event 5 on each partition, then deleted.
    old = store(blob_container, "payments", "old-pod")
    for partition in "0123":
        await old.fence(
            partition, 1, start=checkpointblobs.Position(offset="500", sequence_number=5)
        )
    caplog.set_level(logging.INFO)
    async with reading_pod(
        consumer_emulator.connection_string(),
        azurite,
        blob_container,
        Recorder(),
        batch=BATCH,
        owned={p: (2, "owned") for p in "0123"},
        eventHubName="payments",
    ) as (_, source):
        await eventually(lambda: len(source.reports) == 4, within=20, what="4 reports")
        await asyncio.sleep(4)  # a few rounds of restarts (1, 2 s)
        assert {r.state for r in source.reports.values()} == {"failing"}
        errors_ = {r.error for r in source.reports.values()}
        assert all("Event Hub 'payments'" in e and "does not exist" in e for e in errors_), errors_
        # asyncio's report of an aiohttp session collected just then is left out: it names
        # whatever the garbage collector found, an earlier test's too (seen once, on a
        # loaded machine).
        said = [
            r
            for r in caplog.records
            if r.levelno >= logging.WARNING
            and not (r.name == "asyncio" and r.getMessage().startswith("Unclosed"))
        ]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert "Event Hub 'payments'" in said[0].getMessage()
