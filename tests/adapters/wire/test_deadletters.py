"""Dead letters on Azurite: written where the checkpoints live, readable back, idempotent."""

from __future__ import annotations

import datetime
import json
from typing import Any

from eventhub_balancer.adapters import deadletters, deliveries

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


async def test_a_dead_letter_lands_in_the_checkpoint_container(blob_container: Any) -> None:
    events = [
        deliveries.ReceivedEvent(
            partition="0",
            sequence_number=n,
            offset=str(n),
            enqueued_time=T0,
            partition_key=None,
            properties={},
            body=b"poison",
        )
        for n in (5, 6)
    ]
    writer = deadletters.DeadLetterWriter(
        blob_container,
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
    )
    name = await writer.write(events, error="boom", attempts=3, pod="pod-a", epoch=2)
    # The next owner writes the same batch again: the same blob, replaced.
    again = await writer.write(events, error="boom", attempts=3, pod="pod-b", epoch=3)
    assert name == again == "shop.servicebus.windows.net/orders/$default/deadletter/0/5-6.json"
    listed = [b.name async for b in blob_container.list_blobs(name_starts_with="shop")]
    assert listed == [name]
    data = await (await blob_container.download_blob(name)).readall()
    body = json.loads(data)
    assert (body["pod"], body["epoch"], [e["body"] for e in body["events"]]) == (
        "pod-b",
        3,
        ["poison", "poison"],
    )
