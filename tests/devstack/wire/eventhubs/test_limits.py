"""Event Hubs' limits on receivers, as the emulator enforces them: throttling on demand
(``com.microsoft:server-busy``, refused and detached links) and at most 5 receivers without
an owner level per partition and consumer group (``amqp:resource-limit-exceeded``), seen
through the unmodified SDK."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.eventhub._pyamqp import error as amqp
from azure.eventhub.aio import EventHubConsumerClient

from tests.support.fixtures.eventhubs import EventHubTarget


async def nothing(events: Any) -> None:
    return None


@contextlib.asynccontextmanager
async def link(
    target: EventHubTarget, partition: str = "0", owner_level: int | None = None
) -> AsyncIterator[Any]:
    """An opened (or refused) receive link of the SDK's per-partition consumer."""
    client = EventHubConsumerClient.from_connection_string(
        target.connection_string, "$Default", retry_total=0
    )
    consumer: Any = client._create_consumer(
        "$Default",
        partition,
        "-1",
        nothing,  # type: ignore[arg-type]  # never called: the link is closed first
        owner_level=owner_level,
        prefetch=1,
    )
    try:
        yield consumer
    finally:
        await consumer.close()
        await client.close()


async def work_until_detached(consumer: Any) -> None:
    for _ in range(100):  # each turn reads what came; the detach is already on its way
        await consumer._handler.do_work_async()


def condition_of(error: BaseException) -> str:
    condition = getattr(error, "condition", b"")
    return bytes(getattr(condition, "value", condition)).decode()


async def test_a_throttled_partition_refuses_receivers_in_event_hubs_words(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    assert emu.throttle(eventhubs_hub.name, seconds=30, partitions=["0"], wait_seconds=7) == 0
    try:
        async with link(eventhubs_hub) as refused:
            with pytest.raises(amqp.AMQPLinkError) as raised:
                await refused._open()
        async with link(eventhubs_hub, partition="1") as other:
            await other._open()  # only partition 0 is throttled
    finally:
        emu.clear_throttles(eventhubs_hub.name)
    assert condition_of(raised.value) == "com.microsoft:server-busy"
    assert "being throttled. Error code : 50002. Please wait 7 seconds and try again." in str(
        raised.value
    )
    assert len(emu.throttled_attaches(eventhubs_hub.name)) == 1
    async with link(eventhubs_hub) as opened:
        await opened._open()  # throttling ended


async def test_throttling_detaches_the_open_receivers(eventhubs_hub: EventHubTarget) -> None:
    emu = eventhubs_hub.emulator
    async with link(eventhubs_hub, owner_level=3) as opened:
        await opened._open()
        assert emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 1
        assert emu.throttle(eventhubs_hub.name, seconds=0.5) == 1
        assert emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 0
        with pytest.raises(amqp.AMQPLinkError) as raised:
            await work_until_detached(opened)
    assert condition_of(raised.value) == "com.microsoft:server-busy"


async def test_a_sixth_receiver_without_owner_level_is_refused(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(5):
            await (await stack.enter_async_context(link(eventhubs_hub)))._open()
        assert emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 5
        async with link(eventhubs_hub) as sixth:
            with pytest.raises(amqp.AMQPLinkError) as raised:
                await sixth._open()
        assert condition_of(raised.value) == "amqp:resource-limit-exceeded"
        assert str(raised.value).count(
            "Exceeded the maximum number of allowed receivers per partition in a consumer "
            "group which is 5. List of connected receivers - nil, nil, nil, nil, nil."
        )
        # An owner level is never refused for the count: it takes the partition from them.
        async with link(eventhubs_hub, owner_level=1) as owner:
            await owner._open()
            assert emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 1
