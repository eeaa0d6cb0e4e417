"""Every Event Hubs client the adapter builds shares one TLS context, which verifies as the
SDK's own default does: built once, not once per connection."""

from __future__ import annotations

import ssl

from eventhub_balancer.adapters import eventhubs

KEY = "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey=eA"


def coordinates(hub: str) -> eventhubs.Coordinates:
    return eventhubs.Coordinates(
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name=hub,
        connection_string=KEY,
    )


async def test_every_client_shares_one_tls_context() -> None:
    contexts = []
    for hub in ("orders", "payments"):
        async with eventhubs.producer(coordinates(hub)) as client:
            contexts.append(client._config.ssl_context)
    assert contexts[0] is not None
    assert contexts[0] is contexts[1]


def test_the_context_verifies_the_server_and_its_host_name() -> None:
    context = eventhubs.tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.protocol == ssl.PROTOCOL_TLS_CLIENT
