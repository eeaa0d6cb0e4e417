"""The chaos run counts the batches each partition dead-lettered in one location from the
blob names alone (`chaoswatches.deadletter_batches`), on Azurite."""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack import azurite as azurite_launcher
from eventhub_balancer_devstack import chaoswatches


async def test_dead_letter_blobs_are_counted_per_partition(
    azurite: azurite_launcher.Azurite, blob_container: Any
) -> None:
    prefix = chaoswatches.deadletter_prefix(hub="chaos", consumer_group="$Default")
    names = [f"{prefix}7/10-12.json", f"{prefix}7/40-40.json", f"{prefix}12/3-9.json"]
    # Beside them: a checkpoint and another group's dead letters, which are not counted.
    names += [
        prefix.replace("deadletter/", "checkpoint/7"),
        f"{prefix}".replace("$", "x") + "7/1-1",
    ]
    for name in names:
        await blob_container.upload_blob(name, b"{}")
    counts = await chaoswatches.deadletter_batches(
        connection_string=azurite.connection_string,
        container=blob_container.container_name,
        prefix=prefix,
    )
    assert counts == {"7": 2, "12": 1}
