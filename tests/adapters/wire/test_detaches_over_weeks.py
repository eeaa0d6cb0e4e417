"""A healthy link's rare detaches never add up to a failed partition.

Event Hubs detaches a receive link now and then on its own (a service upgrade, a partition
moved between its nodes: ``amqp:link:detach-forced``), and the receiver opens it again. Its
reopens are counted, and `receiving.REOPEN_ATTEMPTS` failures in a row fail the partition;
the count started again only when events came. On a quiet partition nothing comes, so the
detaches of weeks added up: a partition whose link had been healthy for days between them
was failed (an ERROR, its worker restarted, reported failing to the operator) at its sixth
detach. Now a link that stayed open longer than `receiving.HEALTHY_LINK_S` ends a run of
failures: only failures in a row are counted.

Replayed on the local emulator, on an idle partition, with the SDK's own retries off (each
detach reaches the receiver) and the bound shortened: more detaches than the reopen budget,
each after the link stayed open past the bound, leave the partition receiving.
"""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer.adapters import deliveries, receiving
from tests.support.consumerfakes import eventually
from tests.support.fixtures.eventhubs import EventHubTarget

#: Each link stays open this long before it is detached: past `HEALTHY_S`.
OPEN_S = 0.6
HEALTHY_S = 0.3
DETACHES = receiving.REOPEN_ATTEMPTS + 2


@pytest.fixture(autouse=True)
def quick_reopens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiving, "SDK_RETRY_TOTAL", 0)
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_S", 0.05)
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_MAX_S", 0.2)
    monkeypatch.setattr(receiving, "HEALTHY_LINK_S", HEALTHY_S, raising=False)


async def test_detaches_of_a_healthy_idle_link_do_not_fail_its_partition(
    eventhubs_hub: EventHubTarget,
) -> None:
    emu = eventhubs_hub.emulator
    running = receiving.PartitionReceiver(
        address=receiving.EventHubAddress(
            emu.fully_qualified_namespace,
            eventhubs_hub.name,
            connection_string=eventhubs_hub.connection_string,
        ),
        partition="0",
        epoch=1,
        position=deliveries.ReceivePosition.earliest(),
    )
    running.start()
    try:
        for detach in range(1, DETACHES + 1):
            await eventually(
                lambda: emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 1,
                within=20,
                what=f"the link open before detach {detach}",
            )
            await asyncio.sleep(OPEN_S)
            assert emu.detach(eventhubs_hub.name, partitions=["0"]) == 1
        await eventually(
            lambda: emu.receiver_count(eventhubs_hub.name, "$Default", "0") == 1,
            within=20,
            what="the link open after the last detach",
        )
        # Still receiving: a failed partition raises here.
        batch = await running.next_batch(max_size=10, max_wait=0.1)
        assert batch.events == []
    finally:
        await running.close()
