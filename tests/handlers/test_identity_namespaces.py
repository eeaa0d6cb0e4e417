"""The operator's own Azure identity is lent only to the namespaces an admin lists.

Tenant B names tenant A's hub and checkpoint account with ``workloadIdentity``: the cycle
refuses before any client or token exists, B's status says what to configure, and nothing
about A's hub (its partitions, its blobs' epochs, whether it exists) reaches B's status.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs, eventhubs, hubclients
from eventhub_balancer.handlers import cycles, memories
from tests.support import fakes

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
IDENTITY_SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "tenant-a.servicebus.windows.net",
        "name": "payments",
        "credentials": {"workloadIdentity": {}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "accountUrl": "https://tenanta.blob.core.windows.net",
        "credentials": {"workloadIdentity": {}},
    },
    "selector": {"matchLabels": {"app": "c"}},
}


def no_client(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("a client was built for a namespace the identity is not lent to")


@pytest.fixture
def dialled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any client the adapter would build fails the test."""
    monkeypatch.setattr(hubclients, "_open", no_client)
    monkeypatch.setattr(blobs, "open_container", no_client)


async def test_a_namespace_not_listed_gets_a_condition_and_nothing_of_the_hub(
    dialled: None,
) -> None:
    kube = fakes.FakeKube()
    kube.add_consumer("tenant-b", "spy", IDENTITY_SPEC)
    kube.add_pod("tenant-b", "a", labels={"app": "c"}, since=T0)
    hubs = eventhubs.EventHubs(
        identity_policy=eventhubs.IdentityPolicy(namespaces=("tenant-a", "team-*"))
    )
    memory = memories.Memory()
    for seconds in (0, 60):
        await cycles.run_cycle(
            kube=kube,
            hubs=hubs,
            namespace="tenant-b",
            name="spy",
            memory=memory,
            now=T0 + datetime.timedelta(seconds=seconds),
        )
    hub = kube.condition("tenant-b", "spy", "EventHubReachable")
    assert (hub["status"], hub["reason"]) == ("False", "IdentityNotAllowed")
    assert "spec.eventHub.credentials" in hub["message"]
    assert "--identity-namespace" in hub["message"]
    assert "connectionStringSecretRef" in hub["message"]
    store = kube.condition("tenant-b", "spy", "CheckpointStoreReachable")
    assert (store["status"], store["reason"]) == ("False", "IdentityNotAllowed")
    assert "spec.checkpointStore.credentials" in store["message"]
    status = kube.status("tenant-b", "spy")
    assert "partitionCount" not in status  # unknown, not 0
    assert (status["epochs"], status["assignment"]) == ({}, [])
    assert "tenant-a" not in json.dumps(status)  # nothing of A's hub, not even its name


async def test_the_adapter_refuses_every_read_with_the_operators_identity(dialled: None) -> None:
    hubs = eventhubs.EventHubs(identity_policy=eventhubs.IdentityPolicy(namespaces=()))
    with pytest.raises(errors.IdentityNotAllowed, match=r"spec\.eventHub\.credentials"):
        await hubs.partitions(
            consumer="b/spy",
            fully_qualified_namespace="tenant-a.servicebus.windows.net",
            eventhub_name="payments",
            connection_string=None,
            client_id=None,
            now=0.0,
            namespace="tenant-b",
        )
    with pytest.raises(errors.IdentityNotAllowed):
        await hubs.last_sequence_numbers(
            fully_qualified_namespace="tenant-a.servicebus.windows.net",
            eventhub_name="payments",
            connection_string=None,
            client_id=None,
            partitions=["0"],
            namespace="tenant-b",
        )
    with pytest.raises(errors.IdentityNotAllowed, match=r"spec\.checkpointStore\.credentials"):
        await hubs.checkpoints(
            fakes.store_address(
                fully_qualified_namespace="tenant-a.servicebus.windows.net",
                eventhub_name="payments",
                account_url="https://tenanta.blob.core.windows.net",
                consumer_namespace="tenant-b",
            )
        )


def test_the_policy_lends_the_identity_only_to_listed_namespaces() -> None:
    listed = eventhubs.IdentityPolicy(namespaces=("shop", "team-*"))
    assert listed.allows("shop")
    assert listed.allows("team-red")
    assert not listed.allows("shopping")
    assert not listed.allows(None)  # nobody says who asks
    assert not eventhubs.IdentityPolicy(namespaces=()).allows("shop")
    # A connection string of the consumer's own needs no lending.
    eventhubs.IdentityPolicy(namespaces=()).check(
        namespace="shop", field="spec.eventHub.credentials", connection_string="Endpoint=sb://x/"
    )


def test_ehb_operator_lends_the_identity_to_no_namespace_by_default() -> None:
    import argparse

    from eventhub_balancer.cli import operator_cmd

    parser = argparse.ArgumentParser()
    operator_cmd.add_arguments(parser)
    default = operator_cmd.identity_policy(parser.parse_args(["-A"]))
    assert default.namespaces == ()
    assert not default.allows("shop")
    listed = operator_cmd.identity_policy(
        parser.parse_args(["-A", "--identity-namespace", "shop", "--identity-namespace", "ops"])
    )
    assert listed.allows("ops")
