"""Every Event Hubs client of a process, the operator's and a pod's, shares one TLS context
(`adapters.tlscontexts`), which verifies as the SDK's own default does: built once, not once
per connection."""

from __future__ import annotations

import ssl

import certifi

from eventhub_balancer.adapters import eventhubs, receiving, tlscontexts

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
    consumer = receiving.make_client(
        receiving.EventHubAddress(
            fully_qualified_namespace="shop.servicebus.windows.net",
            eventhub_name="orders",
            connection_string=KEY,
        )
    )
    try:
        contexts.append(consumer._config.ssl_context)
    finally:
        await consumer.close()
    assert contexts[0] is not None
    assert all(context is contexts[0] for context in contexts)


def test_the_context_verifies_the_server_and_its_host_name_as_the_sdk_does() -> None:
    context = tlscontexts.eventhub_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.protocol == ssl.PROTOCOL_TLS_CLIENT
    # the SDK's default trust (connection_verify unset) is certifi's bundle
    bundle = ssl.create_default_context(cafile=certifi.where())
    assert len(context.get_ca_certs()) == len(bundle.get_ca_certs()) > 0
