"""Owner level (epoch): a higher epoch kicks the holder with amqp:link:stolen; lower is refused."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from azure.eventhub import EventHubConsumerClient
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer

from tests.support.fixtures.eventhubs import EventHubTarget

WAIT_S = 20.0


async def _wait_for(condition: Any, wait_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + wait_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.05)


def _aio_receiver(
    target: EventHubTarget, owner_level: int | None, errors: list[Exception]
) -> tuple[AioConsumer, asyncio.Task[None]]:
    client = AioConsumer.from_connection_string(
        target.connection_string, consumer_group="$Default", load_balancing_interval=0.5
    )

    async def on_event(context: Any, event: Any) -> None:
        return None

    async def on_error(context: Any, error: Exception) -> None:
        errors.append(error)

    task = asyncio.create_task(
        client.receive(on_event, partition_id="0", owner_level=owner_level, on_error=on_error)
    )
    return client, task


async def test_higher_epoch_kicks_aio(eventhubs_hub: EventHubTarget) -> None:
    emu = eventhubs_hub.emulator
    first_errors: list[Exception] = []
    first, first_task = _aio_receiver(eventhubs_hub, 1, first_errors)
    await _wait_for(lambda: emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 1)
    second_errors: list[Exception] = []
    second, second_task = _aio_receiver(eventhubs_hub, 2, second_errors)
    await _wait_for(lambda: bool(first_errors))
    assert "amqp:link:stolen" in str(first_errors[0]) or "stolen" in str(first_errors[0]).lower()
    assert emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 1
    # A lower epoch is now refused, and the holder keeps the partition.
    third_errors: list[Exception] = []
    third, third_task = _aio_receiver(eventhubs_hub, 1, third_errors)
    await _wait_for(lambda: bool(third_errors))
    assert "owner level 2" in str(third_errors[0])
    assert second_errors == []
    for client, task in ((first, first_task), (second, second_task), (third, third_task)):
        await client.close()
        await asyncio.wait_for(task, WAIT_S)
    await _wait_for(lambda: emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 0)


async def test_receiver_without_epoch_is_refused_while_an_epoch_holds(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    holder_errors: list[Exception] = []
    holder, holder_task = _aio_receiver(eventhubs_hub, 5, holder_errors)
    await _wait_for(lambda: emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 1)
    plain_errors: list[Exception] = []
    plain, plain_task = _aio_receiver(eventhubs_hub, None, plain_errors)
    await _wait_for(lambda: bool(plain_errors))
    assert "without owner level" in str(plain_errors[0])
    assert holder_errors == []
    for client, task in ((holder, holder_task), (plain, plain_task)):
        await client.close()
        await asyncio.wait_for(task, WAIT_S)


def test_higher_epoch_kicks_sync(eventhubs_hub: EventHubTarget) -> None:
    emu = eventhubs_hub.emulator
    errors: list[Exception] = []
    closed: list[Any] = []
    first = EventHubConsumerClient.from_connection_string(
        eventhubs_hub.connection_string, consumer_group="$Default", load_balancing_interval=0.5
    )
    thread = threading.Thread(
        target=first.receive,
        kwargs={
            "on_event": lambda context, event: None,
            "on_error": lambda context, error: errors.append(error),
            "on_partition_close": lambda context, reason: closed.append(reason),
            "partition_id": "0",
            "owner_level": 1,
        },
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while emu.receiver_count(eventhubs_hub.name, "$Default", "0") != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = EventHubConsumerClient.from_connection_string(
        eventhubs_hub.connection_string, consumer_group="$Default", load_balancing_interval=0.5
    )
    thread2 = threading.Thread(
        target=second.receive,
        kwargs={"on_event": lambda c, e: None, "partition_id": "0", "owner_level": 2},
        daemon=True,
    )
    thread2.start()
    while not errors:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert "stolen" in str(errors[0]).lower()
    first.close()
    second.close()
    thread.join(WAIT_S)
    thread2.join(WAIT_S)
    assert not thread.is_alive()
    assert not thread2.is_alive()
    assert [str(r) for r in closed][:1] == ["CloseReason.OWNERSHIP_LOST"]
