"""A consumer group or hub that does not exist, against the Event Hubs emulator: the receiver
says so at once (no loop of reopens) and the pod's runtime logs it once, reports every
partition failing with it, and processes as soon as the group is created.

The emulator refuses the link as Event Hubs does: an attach without source or target, then a
detach with ``amqp:not-found`` naming the entity (``<namespace>:eventhub:<hub>~<n>|<group>``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, receiving
from eventhub_balancer.consumer import partitions
from tests.support.consumerfakes import Recorder, eventually
from tests.support.fixtures.consumer import reading_pod, send_events

BATCH = partitions.BatchSettings(batch_size=100, max_wait=0.1, retry_backoff=0.05)


def receiver(emulator: Any, *, hub: str = "orders", group: str) -> receiving.PartitionReceiver:
    address = receiving.EventHubAddress(
        fully_qualified_namespace=emulator.fully_qualified_namespace,
        eventhub_name=hub,
        consumer_group=group,
        connection_string=emulator.connection_string(),
    )
    return receiving.PartitionReceiver(
        address=address, partition="0", epoch=1, position=deliveries.ReceivePosition.after(-1)
    )


async def first_failure(emulator: Any, **where: str) -> tuple[BaseException, float]:
    """What the receiver's first batch raises, and after how many seconds."""
    opened = receiver(emulator, **where)
    started = time.monotonic()
    opened.start()
    try:
        with pytest.raises(errors.EventHubNotFound) as raised:
            await opened.next_batch(max_size=10, max_wait=30)
    finally:
        await opened.close()
    return raised.value, time.monotonic() - started


async def test_the_receiver_says_a_missing_group_at_once(
    consumer_emulator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    error, _ = await first_failure(consumer_emulator, group="analytics")
    assert isinstance(error, errors.ConsumerGroupNotFound)
    assert str(error) == (
        f"consumer group 'analytics' of Event Hub 'orders' in "
        f"{consumer_emulator.fully_qualified_namespace} does not exist: create it, or fix "
        "spec.eventHub.consumerGroup"
    )
    # At once means at the first refusal: no link is opened again before it says so.
    assert not [r for r in caplog.records if "reopen" in r.getMessage()]


async def test_the_receiver_says_a_missing_hub_without_blaming_the_group(
    consumer_emulator: Any,
) -> None:
    error, _ = await first_failure(consumer_emulator, hub="nohub", group="$Default")
    assert not isinstance(error, errors.ConsumerGroupNotFound)
    assert str(error).startswith(
        f"Event Hub 'nohub' in {consumer_emulator.fully_qualified_namespace}, or its consumer "
        "group '$Default', does not exist: fix spec.eventHub.name or spec.eventHub.consumerGroup "
        "(Event Hubs: "
    )


async def test_the_runtime_logs_it_once_reports_it_and_starts_once_the_group_exists(
    consumer_emulator: Any, azurite: Any, blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": 5, "1": 5, "2": 5, "3": 5})
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
        await eventually(lambda: len(source.reports) == 4, within=20, what="4 reports")
        await asyncio.sleep(4)  # a few rounds of restarts (1, 2 s)
        assert {r.state for r in source.reports.values()} == {"failing"}
        assert all("consumer group 'analytics'" in r.error for r in source.reports.values())
        said = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert said[0].levelname == "ERROR"
        assert "consumer group 'analytics' of Event Hub 'orders'" in said[0].getMessage()

        consumer_emulator.create_consumer_group("orders", "analytics")
        await eventually(lambda: len(recorder.done) == 20, within=40, what="all 20 events")
        await eventually(lambda: not source.reports, within=10, what="the reports cleared")
