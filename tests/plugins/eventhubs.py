"""Fixtures for the Event Hubs emulator (the local stack's Event Hubs).

``eventhubs_emulator`` is one emulator per test session, in a thread of its own so that
sync SDK clients, aio clients and kopf all reach it; tests stay apart by using a fresh
hub from ``eventhubs_hub`` (its ``connection_string`` is scoped to it)::

    def test_x(eventhubs_hub):
        producer = EventHubProducerClient.from_connection_string(eventhubs_hub.connection_string)

Tests that break things for everyone (``disconnect_all``) take ``private_eventhubs_emulator``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import pytest

from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

#: Partitions of the hub a test gets unless it asks for more with
#: overriding ``eventhubs_hub_partitions`` (a fixture) in their module.
DEFAULT_PARTITIONS = 4

_hub_numbers = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class EventHubTarget:
    """A hub of its own for one test."""

    emulator: EventHubsEmulator
    name: str
    partitions: int

    @property
    def connection_string(self) -> str:
        return self.emulator.connection_string(self.name)

    @property
    def namespace_connection_string(self) -> str:
        return self.emulator.connection_string()


@pytest.fixture(scope="session")
def eventhubs_emulator() -> Iterator[EventHubsEmulator]:
    """One emulator on 127.0.0.1 (a free port) for the whole session."""
    with EventHubsEmulator(consumer_groups=("$Default", "analytics")).running_in_thread() as emu:
        yield emu


@pytest.fixture
def private_eventhubs_emulator() -> Iterator[EventHubsEmulator]:
    """An emulator for one test only (for tests that disconnect or stop it)."""
    with EventHubsEmulator(consumer_groups=("$Default", "analytics")).running_in_thread() as emu:
        yield emu


@pytest.fixture
def eventhubs_hub_partitions() -> int:
    """How many partitions ``eventhubs_hub`` has; override the fixture to change it."""
    return DEFAULT_PARTITIONS


@pytest.fixture
def eventhubs_hub(
    eventhubs_emulator: EventHubsEmulator,
    eventhubs_hub_partitions: int,
    request: pytest.FixtureRequest,
) -> EventHubTarget:
    """A fresh, uniquely named hub in the session's emulator."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{next(_hub_numbers)}"
    eventhubs_emulator.create_hub(name, eventhubs_hub_partitions)
    return EventHubTarget(
        emulator=eventhubs_emulator, name=name, partitions=eventhubs_hub_partitions
    )
