"""The operator's checkpoint probes go over a container client kept between cycles
(`eventhubs.checkpoint_containers`), against Azurite: one client for many reads, and one
that fails is dropped, not kept."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import eventhubs
from eventhub_balancer_devstack import azurite as azurite_launcher
from tests.support import fakes


async def test_reads_of_one_container_share_one_client(
    azurite: azurite_launcher.Azurite, blob_container: Any
) -> None:
    containers = eventhubs.checkpoint_containers()
    where = fakes.store_address(
        container_name=blob_container.container_name, connection_string=azurite.connection_string
    )
    try:
        for _ in range(3):
            assert await eventhubs.read_checkpoints(where, containers=containers) == {}
        assert (containers.opened, len(containers)) == (1, 1)
        await blob_container.delete_container()
        with pytest.raises(errors.ConfigurationError, match="container"):
            await eventhubs.read_checkpoints(where, containers=containers)
        assert len(containers) == 0  # the failed client was closed, not kept
    finally:
        await containers.close()
