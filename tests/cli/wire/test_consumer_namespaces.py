"""``ehb checkpoints`` and ``ehb deadletters`` find the EventHubConsumer in ``-n``, else in the
kubeconfig context's namespace, as kubectl and ``ehb status`` do; ``ehb checkpoints list``
takes the consumer's NAME and reads where its checkpoints are from the CR."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventhub_balancer import cli, errors
from eventhub_balancer.adapters import checkpointing, kubeapi
from eventhub_balancer.cli import checkpoints, consumertargets

SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "consumerGroup": "billing",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "orders-checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "orders"}},
}
BLOB_CONNECTION_STRING = "AccountName=shop;AccountKey=c2VjcmV0"
EVENTHUB_CONNECTION_STRING = (
    "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey=c2VjcmV0"
)
EXPORT = {
    "kind": "EventHubCheckpoints",
    "version": 1,
    "checkpoints": [{"partition": "0", "sequenceNumber": 5}],
}


class FakeAPI:
    """The Kubernetes API as the commands use it: every namespace asked for is recorded, and
    the EventHubConsumer ``orders`` is in ``shop`` only when ``found`` holds it."""

    def __init__(
        self, asked: list[str], found: set[tuple[str, str]], secrets: dict[str, str]
    ) -> None:
        self.asked = asked
        self.found = found
        self.secrets = secrets

    async def get_consumer(self, *, namespace: str, name: str) -> dict[str, Any]:
        self.asked.append(namespace)
        if (namespace, name) not in self.found:
            raise errors.NotFound(f"EventHubConsumer {namespace}/{name} not found")
        return {"metadata": {"namespace": namespace, "name": name}, "spec": SPEC}

    async def list_consumers(self, *, namespace: str | None) -> list[dict[str, Any]]:
        """Cluster-wide only: where a consumer not found in the namespace asked is."""
        assert namespace is None
        return [{"metadata": {"namespace": ns, "name": n}, "spec": SPEC} for ns, n in self.found]

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str:
        return self.secrets[name]

    def close(self) -> None:
        pass


@pytest.fixture
def found() -> set[tuple[str, str]]:
    return set()


@pytest.fixture
def secrets() -> dict[str, str]:
    return {"blob": BLOB_CONNECTION_STRING, "eh": EVENTHUB_CONNECTION_STRING}


@pytest.fixture
def asked(
    monkeypatch: pytest.MonkeyPatch, found: set[tuple[str, str]], secrets: dict[str, str]
) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(
        kubeapi.KubeAPI,
        "from_environment",
        classmethod(lambda cls, config: FakeAPI(seen, found, secrets)),
    )
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", checkpoints.CONNECTION_STRING_ENV):
        monkeypatch.delenv(name, raising=False)
    return seen


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    """A kubeconfig whose current context's namespace is ``shop``."""
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "aks",
                "contexts": [{"name": "aks", "context": {"cluster": "c", "namespace": "shop"}}],
            }
        )
    )
    (tmp_path / "export.json").write_text(json.dumps(EXPORT))
    return str(path)


COMMANDS = [
    ("checkpoints", "export", "orders"),
    ("checkpoints", "reset", "orders", "--to-earliest"),
    ("checkpoints", "import", "orders", "{tmp}/export.json"),
    ("deadletters", "list", "orders"),
    ("deadletters", "show", "orders", "0/5-6"),
    ("deadletters", "replay", "orders", "--all", "--to-hub"),
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_without_n_the_consumer_is_looked_up_in_the_contexts_namespace(
    argv: tuple[str, ...],
    asked: list[str],
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tmp = str(Path(kubeconfig).parent)
    words = [a.replace("{tmp}", tmp) for a in argv]
    # The lookup is all that is tested: not finding the consumer ends the command there.
    assert cli.main([*words, "--kubeconfig", kubeconfig, "-n", "billing"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "ehb: error: EventHubConsumer billing/orders: not found in namespace billing, nor in "
        "any other; `ehb status -n billing` lists the EventHubConsumers there, `ehb status -A` "
        "those of every namespace"
    ]
    assert cli.main([*words, "--kubeconfig", kubeconfig]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "ehb: error: EventHubConsumer shop/orders: not found in namespace shop, nor in any "
        "other; `ehb status -n shop` lists the EventHubConsumers there, `ehb status -A` those "
        "of every namespace"
    ]
    assert asked == ["billing", "shop"]


def test_checkpoints_list_takes_the_consumers_name(
    asked: list[str],
    found: set[tuple[str, str]],
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[tuple[str, str, str, str | None]] = []

    async def list_checkpoints(
        target: consumertargets.ConsumerTarget, *, owner_id: str
    ) -> list[checkpointing.Checkpoint]:
        spec = target.spec
        read.append(
            (
                target.qualified_name,
                spec.checkpoint_container,
                spec.consumer_group,
                target.store.connection_string,
            )
        )
        return [
            checkpointing.Checkpoint(
                partition="0",
                offset="512",
                sequence_number=7,
                owner_id="orders-0",
                epoch=3,
                etag="e",
                last_modified=datetime.datetime.now(datetime.UTC),
            )
        ]

    monkeypatch.setattr(checkpoints, "list_checkpoints", list_checkpoints)
    found.add(("shop", "orders"))
    assert cli.main(["checkpoints", "list", "orders", "--kubeconfig", kubeconfig, "--json"]) == 0
    assert asked == ["shop"]
    assert read == [("shop/orders", "orders-checkpoints", "billing", BLOB_CONNECTION_STRING)]
    out = capsys.readouterr().out
    assert [(r["partition"], r["sequenceNumber"], r["epoch"]) for r in json.loads(out)] == [
        ("0", 7, 3)
    ]
    assert "c2VjcmV0" not in out


def test_checkpoints_list_with_a_name_refuses_the_flags_that_say_where(
    asked: list[str], kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["checkpoints", "list", "orders", "--kubeconfig", kubeconfig, "--container", "cps"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ehb: error: --container: EventHubConsumer orders says where its checkpoints are: "
        "drop --container, or drop NAME to list a consumer group by flags"
    ]
    assert asked == []


def test_checkpoints_list_without_a_name_still_refuses_namespace_for_the_eventhub_one(
    asked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["checkpoints", "list", "--container", "cps", "--hub", "h", "--connection-string", "x"]
    assert cli.main([*argv, "--namespace", "shop.servicebus.windows.net"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ehb: error: --namespace: is now --eventhub-namespace (the Event Hubs namespace, "
        "x.servicebus.windows.net): -n/--namespace names the Kubernetes namespace of an "
        "EventHubConsumer, as in `ehb checkpoints list NAME -n NAMESPACE`"
    ]
    assert cli.main(["checkpoints", "list", "--eventhub-namespace", "n", "--hub", "h"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ehb: error: --container: give the checkpoint container, or an EventHubConsumer NAME "
        "to read it from"
    ]
    assert asked == []


BLOB_PROBLEM = (
    "is not a storage connection string (it has neither a BlobEndpoint nor an AccountName): "
    "write DefaultEndpointsProtocol=https;AccountName=<account>;AccountKey=<key>;"
    "EndpointSuffix=core.windows.net (or BlobEndpoint=https://<account>.blob.core.windows.net/;"
    "SharedAccessSignature=<sas>) there"
)


@pytest.mark.parametrize(
    ("argv", "env", "source"),
    [
        (("--connection-string", "AccountKey=c2VjcmV0"), {}, "--connection-string"),
        (
            (),
            {checkpoints.CONNECTION_STRING_ENV: "AccountKey=c2VjcmV0"},
            "EHB_BLOB_CONNECTION_STRING",
        ),
    ],
    ids=["flag", "environment"],
)
def test_a_malformed_connection_string_is_one_line_naming_where_it_came_from(
    argv: tuple[str, ...],
    env: dict[str, str],
    source: str,
    asked: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    where = ["--container", "cps", "--eventhub-namespace", "shop.servicebus.windows.net"]
    assert cli.main(["checkpoints", "list", *where, "--hub", "h", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [f"ehb: error: {source}: {BLOB_PROBLEM}"]


@pytest.mark.parametrize(
    "argv",
    [("checkpoints", "list", "orders"), ("deadletters", "list", "orders")],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_malformed_connection_string_in_the_crs_secret_names_the_secret(
    argv: tuple[str, ...],
    asked: list[str],
    found: set[tuple[str, str]],
    secrets: dict[str, str],
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    found.add(("shop", "orders"))
    secrets["blob"] = "AccountKey=c2VjcmV0"
    assert cli.main([*argv, "--kubeconfig", kubeconfig]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"ehb: error: Secret shop/blob, key 'cs': {BLOB_PROBLEM}"]
    assert "c2VjcmV0" not in err
