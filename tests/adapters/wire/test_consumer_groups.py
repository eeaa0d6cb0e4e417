"""`adapters.consumergroups` against the Event Hubs emulator: a missing group is found with
the partition listing, an existing one is confirmed without disturbing the pod that holds the
partition, and the facade asks again until the group exists."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import consumergroups, deliveries, eventhubs, receiving
from tests.support import eventhubclients
from tests.support.fixtures.eventhubs import EventHubTarget


def coordinates(target: EventHubTarget, hub: str | None = None) -> eventhubs.Coordinates:
    return eventhubs.Coordinates(
        fully_qualified_namespace=target.emulator.fully_qualified_namespace,
        eventhub_name=hub or target.name,
        connection_string=target.emulator.connection_string(),
    )


async def test_a_missing_group_is_consumer_group_not_found(eventhubs_hub: EventHubTarget) -> None:
    with pytest.raises(errors.ConsumerGroupNotFound) as missing:
        await consumergroups.probe(coordinates(eventhubs_hub), "nobody", "0")
    assert str(missing.value) == (
        f"consumer group 'nobody' of Event Hub {eventhubs_hub.name!r} in "
        f"{eventhubs_hub.emulator.fully_qualified_namespace} does not exist: create it, or fix "
        "spec.eventHub.consumerGroup"
    )


async def test_a_missing_hub_is_not_blamed_on_the_group(eventhubs_hub: EventHubTarget) -> None:
    with pytest.raises(errors.EventHubNotFound) as missing:
        await consumergroups.probe(coordinates(eventhubs_hub, "nohub"), "$Default", "0")
    assert not isinstance(missing.value, errors.ConsumerGroupNotFound)


async def test_an_existing_group_is_confirmed_without_disturbing_its_owner(
    eventhubs_hub: EventHubTarget,
) -> None:
    await consumergroups.probe(coordinates(eventhubs_hub), "analytics", "0")  # nobody reads
    address = receiving.EventHubAddress(
        fully_qualified_namespace=eventhubs_hub.emulator.fully_qualified_namespace,
        eventhub_name=eventhubs_hub.name,
        consumer_group="$Default",
        connection_string=eventhubs_hub.emulator.connection_string(),
    )
    owner = receiving.PartitionReceiver(
        address=address, partition="0", epoch=3, position=deliveries.ReceivePosition.after(-1)
    )
    owner.start()
    try:
        await asyncio.sleep(0.5)  # the owner's link is open
        await consumergroups.probe(coordinates(eventhubs_hub), "$Default", "0")
        await eventhubclients.send(
            eventhubs_hub.connection_string, ["after the probe"], partition_id="0"
        )
        batch = await owner.next_batch(max_size=1, max_wait=5)
        assert [e.body for e in batch.events] == [b"after the probe"]
    finally:
        await owner.close()


async def test_the_facade_keeps_the_ids_and_asks_again_until_the_group_exists(
    eventhubs_hub: EventHubTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    real = consumergroups.probe

    async def counted(where: Any, group: str, partition: str, **kwargs: Any) -> None:
        asked.append(group)
        await real(where, group, partition, **kwargs)

    monkeypatch.setattr(consumergroups, "probe", counted)
    hubs = eventhubs.EventHubs(timeout=5.0)
    where: dict[str, Any] = {
        "consumer": "ns/c",
        "fully_qualified_namespace": eventhubs_hub.emulator.fully_qualified_namespace,
        "eventhub_name": eventhubs_hub.name,
        "connection_string": eventhubs_hub.emulator.connection_string(),
        "client_id": None,
        "consumer_group": "late",
    }
    try:
        with pytest.raises(errors.ConsumerGroupNotFound):
            await hubs.partitions(now=0.0, **where)
        assert hubs.cached("ns/c") == ("0", "1", "2", "3")  # the listing is kept
        with pytest.raises(errors.ConsumerGroupNotFound):
            await hubs.partitions(now=10.0, **where)  # cached ids, asked again
        eventhubs_hub.emulator.create_consumer_group(eventhubs_hub.name, "late")
        assert await hubs.partitions(now=20.0, **where) == (("0", "1", "2", "3"), False)
        assert asked == ["late"] * 3
        await hubs.partitions(now=30.0, **where)  # found, and the list is not fresh: no ask
        assert len(asked) == 3
        await hubs.partitions(now=100.0, **where)  # a fresh listing asks again
        assert len(asked) == 4
    finally:
        await hubs.close()


async def test_a_disabled_hub_is_said_not_confirmed(eventhubs_hub: EventHubTarget) -> None:
    """Event Hubs refuses every receiver of a hub its owner disabled: that is no group that
    exists, and no pod can read until the hub is Active again."""
    eventhubs_hub.emulator.disable_hub(eventhubs_hub.name)
    with pytest.raises(errors.EventHubNotFound) as disabled:
        await consumergroups.probe(coordinates(eventhubs_hub), "$Default", "0")
    assert str(disabled.value).startswith(
        f"Event Hub {eventhubs_hub.name!r} in {eventhubs_hub.emulator.fully_qualified_namespace} "
        "is disabled (Event Hubs: "
    )
    eventhubs_hub.emulator.disable_hub(eventhubs_hub.name, False)
    await consumergroups.probe(coordinates(eventhubs_hub), "$Default", "0")
