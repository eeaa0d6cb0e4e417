"""An admin's token never goes to a tenant's host: the CLI runs the operator's endpoint check.

A tenant writes an EventHubConsumer whose ``accountUrl`` (or Event Hubs namespace) is a host
of theirs; an admin runs ``ehb checkpoints export | reset | import | list`` or
``ehb deadletters`` against it with their own ``DefaultAzureCredential``. The tenant's host is
a listener on 127.0.0.1 that records every connection, the admin's identity a fake credential
that records every token asked of it. Each command must refuse, naming the host and the
setting that would allow it, before any credential exists or any connection is made.
"""

from __future__ import annotations

import datetime
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from eventhub_balancer import cli
from eventhub_balancer.adapters import checkpointdocuments
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.kube import LocalKubeAPI

NAMESPACE = "shop"
NAME = "orders"
#: The longest a command may take to refuse (it needs no network but the local API).
COMMAND_TIMEOUT_S = 30.0


class TenantHost:
    """A TCP listener on 127.0.0.1 standing in for the tenant's host: counts connections."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except OSError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()


class AdminCredential:
    """The admin's DefaultAzureCredential: records that it was built and what was asked."""

    built = 0
    #: Class-level on purpose: the command builds its own instance.
    scopes: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        AdminCredential.built += 1

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        AdminCredential.scopes.extend(scopes)
        return AccessToken("admin-bearer-token", int(time.time()) + 3600)

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> AdminCredential:
        return self

    async def __aexit__(self, *args: object) -> None:
        return None


@pytest.fixture
def tenant_host() -> Iterator[TenantHost]:
    host = TenantHost()
    try:
        yield host
    finally:
        host.close()


@pytest.fixture
def admin_identity(monkeypatch: pytest.MonkeyPatch) -> type[AdminCredential]:
    import azure.identity.aio

    AdminCredential.built = 0
    AdminCredential.scopes = []
    monkeypatch.setattr(azure.identity.aio, "DefaultAzureCredential", AdminCredential)
    for name in (
        "EHB_ALLOWED_EVENTHUB_SUFFIXES",
        "EHB_ALLOWED_BLOB_SUFFIXES",
        "EHB_ALLOW_DEVELOPMENT_ENDPOINTS",
    ):
        monkeypatch.delenv(name, raising=False)
    return AdminCredential


def tenant_consumer(kube: LocalKubeAPI, *, account_url: str, fqns: str) -> None:
    """The tenant's CR: workload identity everywhere, so the admin's own identity is used."""
    identity: dict[str, Any] = {"workloadIdentity": {}}
    kube.create_object(
        clusters.CR,
        {
            "apiVersion": "eventhub-balancer.dev/v1alpha1",
            "kind": "EventHubConsumer",
            "metadata": {"name": NAME},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": fqns,
                    "name": "orders",
                    "credentials": identity,
                },
                "checkpointStore": {
                    "containerName": "checkpoints",
                    "accountUrl": account_url,
                    "credentials": identity,
                },
                "selector": {"matchLabels": {"app": "orders"}},
                "paused": True,
            },
        },
        namespace=NAMESPACE,
    )
    kube.patch_object(
        clusters.CR,
        NAME,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Paused",
                        "status": "True",
                        "reason": "Paused",
                        "message": "every partition released",
                        "lastTransitionTime": clusters.stamp(),
                    }
                ]
            }
        },
        namespace=NAMESPACE,
        subresource="status",
    )


def run_bounded(argv: list[str], tenant: TenantHost) -> int | None:
    """``ehb ARGV`` in a thread; None if it is still running when the tenant got a connection
    or the time is up (today's code retries against the tenant for minutes)."""
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(cli.main(argv)), daemon=True)
    thread.start()
    deadline = time.monotonic() + COMMAND_TIMEOUT_S
    while thread.is_alive() and not tenant.connections and time.monotonic() < deadline:
        thread.join(timeout=0.05)
    return result[0] if result else None


def commands(tmp_path: Path, kubeconfig: Path) -> dict[str, list[str]]:
    export = tmp_path / "export.json"
    document = checkpointdocuments.export_document(
        [],
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        now=datetime.datetime.now(datetime.UTC),
    )
    position = {"partition": "0", "sequenceNumber": 5, "offset": "500", "owner": "", "epoch": 0}
    export.write_text(json.dumps({**document, "checkpoints": [position]}))
    where = ["-n", NAMESPACE, "--kubeconfig", str(kubeconfig)]
    return {
        "checkpoints export": ["checkpoints", "export", NAME, *where],
        "checkpoints reset": ["checkpoints", "reset", NAME, "--to-earliest", *where],
        "checkpoints import": ["checkpoints", "import", NAME, str(export), *where],
        "deadletters list": ["deadletters", "list", NAME, *where],
    }


@pytest.mark.parametrize(
    "command",
    ["checkpoints export", "checkpoints reset", "checkpoints import", "deadletters list"],
)
def test_a_tenants_account_url_gets_no_admin_token(
    command: str,
    local_kube: LocalKubeAPI,
    kubeconfig: Path,
    tenant_host: TenantHost,
    admin_identity: type[AdminCredential],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tenant_consumer(
        local_kube,
        account_url=f"https://127.0.0.1:{tenant_host.port}",
        fqns="shop.servicebus.windows.net",
    )
    status = run_bounded(commands(tmp_path, kubeconfig)[command], tenant_host)
    assert tenant_host.connections == 0, "the tenant's host was dialled"
    assert admin_identity.built == 0, "the admin's credential was built"
    assert status == 1
    err = capsys.readouterr().err
    assert "127.0.0.1" in err
    assert "not allowed" in err
    assert "--allowed-blob-suffix" in err


@pytest.mark.parametrize("command", ["checkpoints reset", "checkpoints import"])
def test_a_tenants_eventhub_namespace_gets_no_admin_token(
    command: str,
    local_kube: LocalKubeAPI,
    kubeconfig: Path,
    tenant_host: TenantHost,
    admin_identity: type[AdminCredential],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tenant_consumer(
        local_kube,
        account_url="https://shop.blob.core.windows.net",
        fqns="tenant.example",
    )
    # The admin lends their identity to the account the CR names (bound to its namespace): the
    # hub the CR names must still pass the allow-list before that identity goes near it.
    argv = commands(tmp_path, kubeconfig)[command]
    argv += ["--use-my-identity", "--bind-location", f"{NAMESPACE}=shop.blob.core.windows.net"]
    status = run_bounded(argv, tenant_host)
    assert admin_identity.built == 0, "the admin's credential was built"
    assert status == 1
    err = capsys.readouterr().err
    assert "'tenant.example' is not allowed" in err
    assert "--allowed-eventhub-suffix" in err


def test_checkpoints_list_checks_the_account_url_it_is_given(
    tenant_host: TenantHost,
    admin_identity: type[AdminCredential],
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "checkpoints",
        "list",
        "--account-url",
        f"https://127.0.0.1:{tenant_host.port}",
        "--container",
        "checkpoints",
        "--eventhub-namespace",
        "shop.servicebus.windows.net",
        "--hub",
        "orders",
    ]
    status = run_bounded(argv, tenant_host)
    assert tenant_host.connections == 0
    assert admin_identity.built == 0
    assert status == 1
    assert "not allowed" in capsys.readouterr().err


def test_an_installer_allowed_suffix_is_honoured_and_the_old_flag_says_what_to_use(
    admin_identity: type[AdminCredential],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from eventhub_balancer.cli import allowedendpoints

    parser = cli.build_parser()
    args = parser.parse_args(
        [
            "checkpoints",
            "list",
            "--account-url",
            "https://shop.blob.core.chinacloudapi.cn",
            "--container",
            "cps",
            "--eventhub-namespace",
            "shop.servicebus.chinacloudapi.cn",
            "--hub",
            "h",
            "--allowed-blob-suffix",
            ".blob.core.chinacloudapi.cn",
        ]
    )
    allowedendpoints.policy(args).check_blob(account_url=args.account_url, connection_string=None)
    monkeypatch.setenv("EHB_ALLOWED_EVENTHUB_SUFFIXES", "servicebus.chinacloudapi.cn")
    allowedendpoints.policy(args).check_eventhub(
        fully_qualified_namespace=args.eventhub_namespace, connection_string=None
    )
    old = ["checkpoints", "list", "--connection-string", "x", "--container", "cps"]
    assert cli.main([*old, "--namespace", "n.servicebus.windows.net", "--hub", "h"]) == 2
    assert "is now --eventhub-namespace" in capsys.readouterr().err
    assert admin_identity.built == 0
