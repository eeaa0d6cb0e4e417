"""`actingidentities.resolve`: an admin command that reads a consumer's Secret refuses a
connection string it could never use as the consumer does, before any client exists."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.cli import actingidentities
from eventhub_balancer.contracts import specs
from tests.handlers import test_cycles


class SecretReader:
    """The one call `resolve` makes of the API for a Secret reference."""

    def __init__(self, value: str) -> None:
        self.value = value

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str:
        return self.value


async def resolve(value: str) -> actingidentities.Acting:
    spec = specs.parse_spec(test_cycles.SPEC)
    api: Any = SecretReader(value)
    return await actingidentities.resolve(
        api,
        argparse.Namespace(),
        consumer="orders",
        namespace="shop",
        spec=spec,
        service=actingidentities.event_hub(spec),
    )


async def test_a_secret_for_the_spec_namespace_is_used() -> None:
    value = "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey=k"
    acting = await resolve(value)
    assert acting.connection_string == value


async def test_a_secret_for_another_namespace_is_refused_naming_both() -> None:
    """Its checkpoints are kept under the spec's name, so a reset or an export would read one
    namespace's partitions and another's checkpoints."""
    with pytest.raises(errors.InvalidInput) as refused:
        await resolve(
            "Endpoint=sb://shop-dr.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey=k"
        )
    assert "names the Event Hubs namespace shop-dr.servicebus.windows.net, but " in str(
        refused.value
    )
    assert str(refused.value).startswith("Secret shop/eh, key 'cs'")
