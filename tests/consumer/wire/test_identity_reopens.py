"""A pod on workload identity asks for its Event Hubs token once, not once per link it opens.

A consumer pod without an Event Hubs connection string reads with its own Azure identity.
Every receive link it opens (each take-up of a partition, each hand-off back, each reopen after
a failure or throttling) and every read of a partition's properties used to build a new
``DefaultAzureCredential`` and never close it: each asked the identity endpoint for a token
of its own (a pod handed partitions all day asked Microsoft Entra ID hundreds of times an
hour, where the limits are per identity), and each left an aiohttp session unclosed, said
at ERROR ("Unclosed client session") in the pod's log once per link. Now the backend holds
one credential, shared by its links and closed with it.

Replayed here on the Event Hubs emulator and Azurite, with a managed identity endpoint on
loopback that hands out tokens: a partition handed to the pod ten times asks one token.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from azure.eventhub.aio import EventHubConsumerClient

from eventhub_balancer.adapters import deliveries, receiving
from eventhub_balancer.consumer import assignments, connections, partitions
from eventhub_balancer.contracts import endpoints
from tests.support import identityendpoints
from tests.support.consumerfakes import configmap, eventually
from tests.support.fixtures.identities import AZURE_SETTINGS

HAND_OFFS = 10


class PlainClient(EventHubConsumerClient):
    """The SDK's client as the pod builds it, speaking plain AMQP: the emulator has no TLS
    (a connection string says so with ``UseDevelopmentEmulator``; a credential cannot)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("ssl_context", None)
        super().__init__(*args, use_tls=False, **kwargs)


@pytest.fixture
def pod_identity(monkeypatch: pytest.MonkeyPatch) -> Iterator[identityendpoints.TokenEndpoint]:
    """The pod's own Azure identity: a managed identity endpoint that hands out tokens."""
    endpoint = identityendpoints.TokenEndpoint(token="pod-token")
    for name in AZURE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IDENTITY_ENDPOINT", f"{endpoint.url}/msi/token")
    monkeypatch.setenv("IDENTITY_HEADER", "pod-secret")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setattr(receiving, "EventHubConsumerClient", PlainClient)
    try:
        yield endpoint
    finally:
        endpoint.close()


async def test_hand_offs_on_workload_identity_ask_one_token_and_close_every_session(
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    pod_identity: identityendpoints.TokenEndpoint,
    caplog: pytest.LogCaptureFixture,
) -> None:
    backends = connections.AzureBackends(
        credentials=connections.Credentials(
            blob_connection_string=azurite.connection_string,
            # The emulator's address is a loopback IP: allowed as a suffix of it.
            endpoint_policy=endpoints.EndpointPolicy(
                eventhub_suffixes=(".0.0.1",), allow_development=True
            ),
        ),
        owner_id="pod-a",
        batch=partitions.BatchSettings(),
    )
    assignment = assignments.from_configmap(
        configmap(
            1,
            {"0": (1, "owned")},
            fullyQualifiedNamespace=consumer_emulator.fully_qualified_namespace,
            checkpointContainer=blob_container.container_name,
        )
    )
    # An aiohttp session that an earlier test in this worker left unclosed is said when it is
    # collected, which may fall within this test (one full run failed so): collect it before
    # watching, so that only the sessions this test leaves are counted.
    gc.collect()
    await asyncio.sleep(0)
    caplog.clear()
    caplog.set_level(logging.ERROR, logger="asyncio")
    async with backends(assignment) as backend:
        for epoch in range(1, HAND_OFFS + 1):
            receiver = backend.open_receiver("0", epoch, deliveries.ReceivePosition.earliest())
            receiver.start()
            try:
                await eventually(
                    lambda: consumer_emulator.receiver_count("orders", "$Default", "0") == 1,
                    within=20,
                    what=f"the link of epoch {epoch} open",
                )
            finally:
                await receiver.close()
        asked_while_open = len(pod_identity.asked)
    gc.collect()  # an unclosed session is said when it is collected
    await asyncio.sleep(0)
    assert asked_while_open == 1  # one token for every link, not one per link
    unclosed = [r for r in caplog.records if "Unclosed" in r.getMessage()]
    assert unclosed == []
