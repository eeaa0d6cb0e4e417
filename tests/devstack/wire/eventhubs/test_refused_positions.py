"""A receive position past the partition's last event is refused, as Event Hubs refuses it.

Event Hubs answers a receiver whose filter names a sequence number or an offset after the
partition's last event by refusing the link (condition ``com.microsoft:argument-error``) in
these words: ``The supplied sequence number '12' is invalid. The last sequence number in the
system is '4'`` (for an offset: ``The supplied offset ...``); a filter at the last event,
exclusive, waits for the next one. The emulator accepted such a filter and waited, so a pod
whose position was past the end passed every local test and then looped on Azure
(docs/local-stack.md, docs/failures.md).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer

from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget

#: An open link on an accepted position waits this long with no error before the test says
#: it was accepted (the emulator answers an attach in milliseconds).
ACCEPTED_AFTER_S = 1.0


async def _open(
    target: EventHubTarget, position: str | int | datetime.datetime, *, inclusive: bool
) -> BaseException | None:
    """Open one partition's receive link (the SDK's per-partition consumer, as the pods do)
    at ``position`` and receive for a moment: the error it ends with, or None."""
    client = AioConsumer.from_connection_string(
        target.connection_string, consumer_group="$Default", retry_total=0
    )

    async def on_events(events: Any) -> None:
        return None

    consumer: Any = client._create_consumer(
        "$Default", "0", position, on_events, event_position_inclusive=inclusive, prefetch=10
    )
    try:
        async with asyncio.timeout(ACCEPTED_AFTER_S):
            await consumer._open()
            await consumer.receive(True, 10, None)
    except TimeoutError:
        return None
    except Exception as e:
        return e
    finally:
        await consumer.close()
        await client.close()
    return None


@pytest.fixture
async def five(eventhubs_hub: EventHubTarget) -> EventHubTarget:
    """Partition 0 holds events 0..4."""
    await clients.send(
        eventhubs_hub.connection_string, [f"e{i}" for i in range(5)], partition_id="0"
    )
    return eventhubs_hub


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
async def test_a_sequence_number_past_the_last_event_is_refused(
    five: EventHubTarget, inclusive: bool
) -> None:
    error = await _open(five, 12, inclusive=inclusive)
    assert error is not None
    text = str(error)
    assert "com.microsoft:argument-error" in text
    assert (
        "The supplied sequence number '12' is invalid. The last sequence number in the system "
        "is '4'" in text
    )
    assert five.emulator.receiver_count(five.name, "$Default", "0") == 0


async def test_the_next_sequence_number_inclusive_is_past_the_end_too(
    five: EventHubTarget,
) -> None:
    error = await _open(five, 5, inclusive=True)
    assert error is not None
    assert "The supplied sequence number '5' is invalid" in str(error)


async def test_an_offset_past_the_last_event_is_refused(five: EventHubTarget) -> None:
    last_offset = five.emulator.partition_info(five.name, "0").last_enqueued_offset
    error = await _open(five, str(last_offset + 1), inclusive=True)
    assert error is not None
    text = str(error)
    assert "com.microsoft:argument-error" in text
    assert (
        f"The supplied offset '{last_offset + 1}' is invalid. The last offset in the system "
        f"is '{last_offset}'" in text
    )


async def test_an_offset_on_an_empty_partition_is_refused(eventhubs_hub: EventHubTarget) -> None:
    """An empty partition has no event at offset 0: its last offset is -1."""
    error = await _open(eventhubs_hub, "0", inclusive=False)
    assert error is not None
    assert "The supplied offset '0' is invalid. The last offset in the system is '-1'" in str(error)


@pytest.mark.parametrize(
    ("position", "inclusive"),
    [(4, False), (4, True), (-1, False), (0, False), ("-1", False), ("@latest", False)],
    ids=["last-exclusive", "last-inclusive", "seq-minus-1", "first", "earliest", "latest"],
)
async def test_positions_within_the_partition_are_accepted(
    five: EventHubTarget, position: str | int, inclusive: bool
) -> None:
    assert await _open(five, position, inclusive=inclusive) is None


async def test_the_last_offset_exclusive_is_accepted_and_gets_the_next_event(
    five: EventHubTarget,
) -> None:
    last_offset = five.emulator.partition_info(five.name, "0").last_enqueued_offset
    assert await _open(five, str(last_offset), inclusive=False) is None
    receiving = asyncio.create_task(
        clients.receive(
            five.connection_string, partition_id="0", count=1, starting_position=str(last_offset)
        )
    )
    await asyncio.sleep(0.5)
    await clients.send(five.connection_string, ["e5"], partition_id="0")
    got = await receiving
    assert [(e.sequence_number, e.body_as_str()) for e in got] == [(5, "e5")]


async def test_an_empty_partition_accepts_sequence_number_minus_one(
    eventhubs_hub: EventHubTarget,
) -> None:
    for inclusive in (False, True):
        assert await _open(eventhubs_hub, -1, inclusive=inclusive) is None
