"""Azurite for tests: one in-memory instance per session, a fresh container per test.

Starting Azurite costs about a second, so the session shares one; tests stay independent by
each using a container of its own (a unique name, deleted afterwards). ``fault_proxy`` puts
the fault-injecting proxy in front of that Azurite for tests of failure handling.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from eventhub_balancer.adapters import blobs
from eventhub_balancer_devstack import azurite as azurite_launcher
from eventhub_balancer_devstack import faultproxy


def unique_container_name(prefix: str = "t") -> str:
    """A valid container name (3-63 lower-case letters, digits, dashes) unique to one test."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


@pytest.fixture(scope="session")
def azurite() -> Iterator[azurite_launcher.Azurite]:
    """An in-memory Azurite on a free 127.0.0.1 port for the whole session."""
    with azurite_launcher.Azurite() as service:
        yield service


@pytest.fixture
async def blob_container(azurite: azurite_launcher.Azurite) -> AsyncIterator[Any]:
    """An open ``ContainerClient`` of a new, empty container on the session's Azurite."""
    async with blobs.open_container(
        container_name=unique_container_name(), connection_string=azurite.connection_string
    ) as container:
        await blobs.ensure_container(container)
        try:
            yield container
        finally:
            with contextlib.suppress(Exception):
                await container.delete_container()


@pytest.fixture
async def fault_proxy(azurite: azurite_launcher.Azurite) -> AsyncIterator[faultproxy.FaultProxy]:
    """A fault proxy in this test's event loop in front of the session's Azurite (no faults yet)."""
    async with faultproxy.FaultProxy(azurite.port) as proxy:
        yield proxy


@pytest.fixture
async def proxied_container(
    azurite: azurite_launcher.Azurite, fault_proxy: faultproxy.FaultProxy
) -> AsyncIterator[Any]:
    """A new container reached through ``fault_proxy`` (created before any fault is set)."""
    connection_string = azurite_launcher.connection_string(host="127.0.0.1", port=fault_proxy.port)
    async with blobs.open_container(
        container_name=unique_container_name("f"), connection_string=connection_string
    ) as container:
        await blobs.ensure_container(container)
        try:
            yield container
        finally:
            fault_proxy.faults.clear()
            with contextlib.suppress(Exception):
                await container.delete_container()
