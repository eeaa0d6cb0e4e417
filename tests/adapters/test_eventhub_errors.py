"""Event Hubs errors are told apart by their text: a missing hub is not a refused port."""

from __future__ import annotations

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import hubclients

WHERE = hubclients.Coordinates(
    fully_qualified_namespace="shop.servicebus.windows.net",
    eventhub_name="orders",
    connection_string=None,
)


@pytest.mark.parametrize(
    "text",
    [
        # A clean-clone run once read "does not exist" into this: the port holds "404".
        "Failed to initiate the connection: [Errno 111] Connect call failed ('127.0.0.1', 40413)",
        "Connection to 127.0.0.1:14040 refused",
        "address 10.0.40.4 unreachable",
    ],
)
def test_a_refused_connection_is_unreachable_whatever_its_port(text: str) -> None:
    assert isinstance(hubclients._wrap(OSError(text), WHERE), errors.EventHubUnreachable)


@pytest.mark.parametrize(
    "text",
    ["amqp:not-found: The messaging entity could not be found", "status 404", "(404) Not Found"],
)
def test_a_missing_hub_is_not_found(text: str) -> None:
    wrapped = hubclients._wrap(OSError(text), WHERE)
    assert isinstance(wrapped, errors.EventHubNotFound)
    assert "does not exist" in str(wrapped)
