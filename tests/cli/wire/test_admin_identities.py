"""The admin's tools are no confused deputy: they act with the identity the CR declares.

End to end: the real ``ehb operator`` (the install's defaults) serves two tenants on the local
Kubernetes API; tenant A's hub
is the local Event Hubs emulator, the dead letters and checkpoints live in Azurite, and the
admin's own identity is a fake managed-identity endpoint (fixture ``managed_identity``,
reached by ``DefaultAzureCredential`` through ``IDENTITY_ENDPOINT``) that records every token
asked of it. Tenant B writes CRs naming A's hub and A's checkpoint account; an admin runs
``ehb deadletters replay`` and ``ehb checkpoints reset | import | export | list`` on them. The
admin's identity, and the admin's own connection string, must never be used for B's CR unless
the admin names them by flag and the host is bound to B's namespace; each refusal names that
flag and binding. A CR with ``spec.serviceAccountName`` is acted on as that ServiceAccount
(a TokenRequest at the local API, exchanged at a fake Microsoft Entra ID endpoint).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub.aio import EventHubProducerClient

from eventhub_balancer import cli
from eventhub_balancer.adapters import (
    blobs,
    checkpointdocuments,
    deadletters,
    deliveries,
    tenantidentities,
)
from eventhub_balancer_devstack import azurite as azurite_launcher
from eventhub_balancer_devstack import clusters
from tests.support import identityendpoints, operatorcommands
from tests.support.fixtures.azurite import unique_container_name
from tests.support.fixtures.operator import Stack, wait_for

A, B = "tenant-a", "tenant-b"
#: Tenant A's Event Hubs namespace and checkpoint account as its CR names them (the hub itself
#: is the emulator's "small" hub, reached through A's Secret).
A_NAMESPACE = "tenant-a.servicebus.windows.net"
A_ACCOUNT = "tenanta.blob.core.windows.net"
A_HUB = "small"
B_CLIENT = "bbbbbbbb-0000-0000-0000-000000000001"
B_TENANT = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def serving(operator_stack: Stack) -> Iterator[Stack]:
    """The local stack with ``ehb operator -A`` serving every namespace, as installed."""
    operator = operatorcommands.start(
        operator_stack.kubeconfig, "-A", "--allow-development-endpoints"
    )
    try:
        yield operator_stack
    finally:
        operator.stop()


def consumer(
    stack: Stack,
    namespace: str,
    name: str,
    *,
    hub: dict[str, Any],
    store: dict[str, Any],
    **spec: Any,
) -> None:
    stack.kube.create_object(
        clusters.CR,
        {
            "apiVersion": "eventhub-balancer.dev/v1alpha1",
            "kind": "EventHubConsumer",
            "metadata": {"name": name},
            "spec": {
                "eventHub": {"fullyQualifiedNamespace": A_NAMESPACE, "name": A_HUB, **hub},
                "checkpointStore": {"containerName": "checkpoints", **store},
                "selector": {"matchLabels": {"app": name}},
                "balancing": {"intervalSeconds": 2},
                **spec,
            },
        },
        namespace=namespace,
    )


def secret_ref(name: str) -> dict[str, Any]:
    return {"credentials": {"connectionStringSecretRef": {"name": name, "key": "cs"}}}


WORKLOAD_IDENTITY: dict[str, Any] = {"credentials": {"workloadIdentity": {}}}


def tenant_a(stack: Stack, azurite: azurite_launcher.Azurite) -> None:
    """Tenant A: its hub and checkpoints through Secrets, as the default install asks."""
    stack.secret(A, name="eh", key="cs")
    stack.secret(A, name="blob", key="cs", value=azurite.connection_string)
    consumer(stack, A, "orders", hub=secret_ref("eh"), store=secret_ref("blob"))


def hub_counts(stack: Stack) -> dict[str, int]:
    """How many events each partition of A's hub holds."""

    async def read() -> dict[str, int]:
        connection = stack.emulator.connection_string(A_HUB)
        async with EventHubProducerClient.from_connection_string(connection) as producer:
            found = {}
            for partition in await producer.get_partition_ids():
                props = await producer.get_partition_properties(partition)
                found[partition] = (
                    0 if props["is_empty"] else props["last_enqueued_sequence_number"] + 1
                )
            return found

    return asyncio.run(read())


async def _dead_letter(connection_string: str, container: str) -> None:
    """B's forged event, dead-lettered in B's own account under the path of A's hub."""
    async with blobs.open_container(
        container_name=container, connection_string=connection_string
    ) as client:
        await blobs.ensure_container(client)
        writer = deadletters.DeadLetterWriter(
            client,
            fully_qualified_namespace=A_NAMESPACE,
            eventhub_name=A_HUB,
            consumer_group="$Default",
        )
        forged = deliveries.ReceivedEvent(
            partition="0",
            sequence_number=1,
            offset="100",
            enqueued_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
            partition_key=None,
            properties={},
            body=b'{"refund": 1000000}',
        )
        await writer.write([forged], error="ValueError", attempts=3, pod="mirror-0", epoch=1)


def mirror_with_dead_letter(stack: Stack, azurite: azurite_launcher.Azurite) -> None:
    """Tenant B's CR naming A's Event Hubs namespace and hub with workload identity, its dead
    letters in its own account (its Secret)."""
    container = unique_container_name("b")
    asyncio.run(_dead_letter(azurite.connection_string, container))
    stack.secret(B, name="blob", key="cs", value=azurite.connection_string)
    consumer(
        stack,
        B,
        "mirror",
        hub=WORKLOAD_IDENTITY,
        store={**secret_ref("blob"), "containerName": container},
        processing={"onFailure": "deadLetter"},
    )


def ehb(capsys: pytest.CaptureFixture[str], stack: Stack, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    status = cli.main([*argv, "-n", B, "--kubeconfig", str(stack.kubeconfig)])
    return status, capsys.readouterr().err


# --- 1: ehb deadletters replay sends a tenant's forged events into another tenant's hub


def test_replay_refuses_the_admins_identity_for_a_cr_naming_another_tenants_hub(
    serving: Stack,
    azurite: azurite_launcher.Azurite,
    managed_identity: identityendpoints.TokenEndpoint,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = serving
    tenant_a(stack, azurite)
    mirror_with_dead_letter(stack, azurite)
    before = hub_counts(stack)

    status, err = ehb(capsys, stack, "deadletters", "replay", "mirror", "--all", "--to-hub")
    assert status == 1
    assert "declares workload identity for the Event Hub without spec.serviceAccountName" in err
    assert f"--use-my-identity --bind-location {B}={A_NAMESPACE}" in err
    assert managed_identity.asked == [], "the admin's identity was asked for a token"
    # With the flag but no binding: still refused, naming the binding.
    status, err = ehb(
        capsys, stack, "deadletters", "replay", "mirror", "--all", "--to-hub", "--use-my-identity"
    )
    assert status == 1
    assert f"{A_NAMESPACE}, which is bound to no namespace" in err
    assert managed_identity.asked == []
    # A binding of A's host to A's namespace (the operator's) does not lend it to B either.
    status, err = ehb(
        capsys,
        stack,
        "deadletters",
        "replay",
        "mirror",
        "--all",
        "--to-hub",
        "--use-my-identity",
        "--bind-location",
        f"{A}={A_NAMESPACE}",
    )
    assert status == 1
    assert "is bound to another namespace" in err
    assert managed_identity.asked == []
    assert hub_counts(stack) == before
    status, err = ehb(capsys, stack, "deadletters", "list", "mirror", "--json")
    assert status == 0, err


def test_replay_refuses_the_admins_own_connection_string_for_another_tenants_hub(
    operator_stack: Stack,
    azurite: azurite_launcher.Azurite,
    managed_identity: identityendpoints.TokenEndpoint,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The admin's shell holds a connection string with Send rights on A's hub (from replaying
    A's own dead letters): B's CR must not turn it against A."""
    stack = operator_stack
    tenant_a(stack, azurite)
    mirror_with_dead_letter(stack, azurite)
    monkeypatch.setenv("EHB_EVENTHUB_CONNECTION_STRING", stack.emulator.connection_string())
    before = hub_counts(stack)

    status, err = ehb(capsys, stack, "deadletters", "replay", "mirror", "--all", "--to-hub")
    assert status == 1
    assert "EHB_EVENTHUB_CONNECTION_STRING: your credential would act on EventHubConsumer" in err
    assert f"--bind-location {B}=127.0.0.1" in err
    assert hub_counts(stack) == before, "B's forged event reached A's hub"
    listed = json.loads(ehb_out(capsys, stack, "deadletters", "list", "mirror", "--json"))
    assert [letter["replayedTime"] for letter in listed] == [None]
    # The same command once the admin says the hub is B's: the event goes where the admin
    # chose, which shows the check above is what kept it out.
    status, err = ehb(
        capsys,
        stack,
        "deadletters",
        "replay",
        "mirror",
        "--all",
        "--to-hub",
        "--bind-location",
        f"{B}=127.0.0.1",
    )
    assert status == 0, err
    assert sum(hub_counts(stack).values()) == sum(before.values()) + 1
    assert managed_identity.asked == []


def ehb_out(capsys: pytest.CaptureFixture[str], stack: Stack, *argv: str) -> str:
    capsys.readouterr()
    assert cli.main([*argv, "-n", B, "--kubeconfig", str(stack.kubeconfig)]) == 0
    return capsys.readouterr().out


# --- 2: ehb checkpoints reset | import | export | list write or read another tenant's
# checkpoints with the admin's identity


def mirror_of_checkpoints(stack: Stack, **spec: Any) -> None:
    """Tenant B's paused CR naming A's account, container, namespace, hub and group, with its
    own hub's Secret for the partition ids."""
    stack.secret(B, name="eh", key="cs")
    consumer(
        stack,
        B,
        "mirror",
        hub=secret_ref("eh"),
        store={"accountUrl": f"https://{A_ACCOUNT}", **WORKLOAD_IDENTITY},
        paused=True,
        **spec,
    )


def checkpoint_commands(tmp_path: Path) -> dict[str, list[str]]:
    export = tmp_path / "export.json"
    document = checkpointdocuments.export_document(
        [],
        fully_qualified_namespace=A_NAMESPACE,
        eventhub_name=A_HUB,
        consumer_group="$Default",
        now=datetime.datetime.now(datetime.UTC),
    )
    position = {"partition": "0", "sequenceNumber": 5, "offset": "500", "owner": "", "epoch": 0}
    export.write_text(json.dumps({**document, "checkpoints": [position]}))
    return {
        "reset": ["checkpoints", "reset", "mirror", "--to-latest"],
        "import": ["checkpoints", "import", "mirror", str(export)],
        "export": ["checkpoints", "export", "mirror"],
        "list": ["checkpoints", "list", "mirror"],
    }


def test_checkpoint_commands_never_act_on_another_tenants_account_as_the_admin(
    serving: Stack,
    azurite: azurite_launcher.Azurite,
    managed_identity: identityendpoints.TokenEndpoint,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    stack = serving
    tenant_a(stack, azurite)
    mirror_of_checkpoints(stack)
    # The operator pauses B's CR: nothing of A's is in its way, as in the attack.
    wait_for(
        lambda: stack.condition(B, "Paused", "mirror").get("status") == "True",
        what="tenant B's CR paused",
    )
    for command, argv in checkpoint_commands(tmp_path).items():
        status, err = ehb(capsys, stack, *argv)
        assert status == 1, command
        assert "declares workload identity for the checkpoint store" in err, command
        assert f"--use-my-identity --bind-location {B}={A_ACCOUNT}" in err, command
        assert "spec.serviceAccountName" in err, command
    assert managed_identity.asked == [], "the admin's identity was asked for a token"
    # Named by flag, for a host bound to B's namespace, the admin's own identity is used: the
    # endpoint sees it.
    status, err = ehb(
        capsys,
        stack,
        "checkpoints",
        "export",
        "mirror",
        "--use-my-identity",
        "--bind-location",
        f"{B}={A_ACCOUNT}",
    )
    assert status == 1
    assert [a.query.get("resource") for a in managed_identity.asked] == [
        "https://storage.azure.com"
    ]


def test_a_cr_with_a_service_account_is_read_as_that_service_account(
    operator_stack: Stack,
    managed_identity: identityendpoints.TokenEndpoint,
    entra_endpoint: identityendpoints.TokenEndpoint,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = operator_stack
    stack.kube.create_object(
        "v1/serviceaccounts",
        {
            "metadata": {
                "name": "mirror-reader",
                "labels": {tenantidentities.OPT_IN_LABEL: tenantidentities.OPT_IN_VALUE},
                "annotations": {
                    tenantidentities.CLIENT_ID_ANNOTATION: B_CLIENT,
                    tenantidentities.TENANT_ID_ANNOTATION: B_TENANT,
                },
            }
        },
        namespace=B,
    )
    mirror_of_checkpoints(stack, serviceAccountName="mirror-reader")
    status, _ = ehb(capsys, stack, "checkpoints", "export", "mirror")
    assert status == 1  # the fake endpoint refuses: only who asked counts
    assert managed_identity.asked == []
    (asked,) = entra_endpoint.asked
    assert asked.path == f"/{B_TENANT}/oauth2/v2.0/token"
    assert asked.form["client_id"] == B_CLIENT
    payload = asked.form["client_assertion"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["sub"] == f"system:serviceaccount:{B}:mirror-reader"
    assert claims["aud"] == [tenantidentities.AUDIENCE]
    # Without its opt-in label the ServiceAccount lends nothing, to the admin's tool either.
    stack.kube.patch_object(
        "v1/serviceaccounts",
        "mirror-reader",
        {"metadata": {"labels": {tenantidentities.OPT_IN_LABEL: None}}},
        namespace=B,
    )
    status, err = ehb(capsys, stack, "checkpoints", "export", "mirror")
    assert status == 1
    assert "has not opted in to lending its identity" in err
    assert len(entra_endpoint.asked) == 1
