"""The real kubectl against both servers: what its ``create`` commands send, as protobuf.

kubectl's typed clients send built-in objects as ``application/vnd.kubernetes.protobuf``, and
never fall back to JSON for them; docs/first-consumer.md has users run exactly these commands.
Each runs against the local API and a real kube-apiserver, and what each server then stores
is compared: everything the local API keeps is what the real one keeps (which adds its
defaults), and the fields the command sets are there on both.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.devstack.wire.conformance import exchanges
from tests.support.fixtures.kube import KUBECTL_TIMEOUT, kubectl_binary

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

NAMESPACE = "shop"

#: How long a real server may take to publish a CRD's schema in /openapi/v3.
OPENAPI_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def kubectls(
    real_kube: RealControlPlane,
    local_kube_api: LocalKubeAPI,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Kubectl]:
    """``kubectls["local"]("get", "ns")``: the real kubectl against each server."""
    binary = kubectl_binary()
    assert binary is not None, "no kubectl: install the devstack"
    folder = tmp_path_factory.mktemp("kubectl")
    configs = {
        "local": local_kube_api.write_kubeconfig(folder / "local.kubeconfig"),
        "real": real_kube.write_kubeconfig(folder / "real.kubeconfig"),
    }

    def runner(config: Path) -> Kubectl:
        def run(*args: str) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(folder)}
            return subprocess.run(
                [binary, *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=KUBECTL_TIMEOUT,
                check=False,
            )

        return run

    return {name: runner(config) for name, config in configs.items()}


def _kept(body: dict[str, Any]) -> dict[str, Any]:
    """What the user gave: no server-set metadata, no status."""
    metadata = {
        k: v
        for k, v in body["metadata"].items()
        if k in ("name", "namespace", "labels", "annotations")
    }
    return {**{k: v for k, v in body.items() if k != "status"}, "metadata": metadata}


def _within(part: Any, whole: Any, path: str = "") -> list[str]:
    """Where ``part`` says something ``whole`` does not (empty if ``part`` is within it)."""
    if isinstance(part, dict) and isinstance(whole, dict):
        return [
            p for k, v in part.items() for p in _within(v, whole.get(k, _MISSING), f"{path}.{k}")
        ]
    if isinstance(part, list) and isinstance(whole, list) and len(part) == len(whole):
        return [
            p
            for i, (a, b) in enumerate(zip(part, whole, strict=True))
            for p in _within(a, b, f"{path}[{i}]")
        ]
    return [] if part == whole else [f"{path}: {part!r} != {whole!r}"]


_MISSING = object()

#: Each command, the object it makes, and the fields it sets (which both servers must keep).
COMMANDS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (
        (
            "create",
            "secret",
            "generic",
            "orders-eh",
            "--from-literal=connectionString=Endpoint=sb://x/",
        ),
        "/api/v1/namespaces/shop/secrets/orders-eh",
        {"type": "Opaque", "data": {"connectionString": "RW5kcG9pbnQ9c2I6Ly94Lw=="}},
    ),
    (
        ("create", "configmap", "settings", "--from-literal=a=1", "--from-literal=empty="),
        "/api/v1/namespaces/shop/configmaps/settings",
        {"data": {"a": "1", "empty": ""}},
    ),
    (
        (
            "create",
            "deployment",
            "orders",
            "--image=busybox:1.36",
            "--replicas=2",
            "--port=8080",
            "--",
            "sleep",
            "3600",
        ),
        "/apis/apps/v1/namespaces/shop/deployments/orders",
        {
            "metadata": {"labels": {"app": "orders"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "orders"}},
                "template": {
                    "metadata": {"labels": {"app": "orders"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "busybox",
                                "image": "busybox:1.36",
                                "command": ["sleep", "3600"],
                                "ports": [{"containerPort": 8080}],
                            }
                        ]
                    },
                },
            },
        },
    ),
    (
        ("create", "deployment", "idle", "--image=busybox", "--replicas=0"),
        "/apis/apps/v1/namespaces/shop/deployments/idle",
        {"spec": {"replicas": 0}},
    ),
    (
        ("create", "serviceaccount", "orders-consumer"),
        "/api/v1/namespaces/shop/serviceaccounts/orders-consumer",
        {},
    ),
    (
        ("create", "role", "reader", "--verb=get,list", "--resource=configmaps"),
        "/apis/rbac.authorization.k8s.io/v1/namespaces/shop/roles/reader",
        {"rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]}]},
    ),
    (
        (
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--serviceaccount=shop:orders-consumer",
        ),
        "/apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings/reader",
        {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "orders-consumer", "namespace": "shop"}
            ],
        },
    ),
]


def test_kubectl_create_commands_store_what_a_real_server_stores(
    kubectls: dict[str, Kubectl], servers: exchanges.Servers
) -> None:
    for name, kubectl in kubectls.items():
        done = kubectl("create", "namespace", NAMESPACE)
        assert done.returncode == 0, (name, done.stderr)
    namespaces = servers.request("GET", f"/api/v1/namespaces/{NAMESPACE}").agree(200)
    assert namespaces.local.metadata["labels"] == namespaces.real.metadata["labels"]
    assert namespaces.local.body["spec"] == namespaces.real.body["spec"]
    for args, path, sets in COMMANDS:
        for name, kubectl in kubectls.items():
            done = kubectl("-n", NAMESPACE, *args)
            assert done.returncode == 0, (name, args, done.stderr)
        stored = servers.request("GET", path).agree(200)
        local, real = (_kept(answer.body) for answer in stored)
        assert _within(local, real) == [], (args, local, real)
        for answer in stored:
            assert _within(sets, answer.body) == [], (args, answer.body)


def test_kubectl_create_token(kubectls: dict[str, Kubectl], servers: exchanges.Servers) -> None:
    for name, kubectl in kubectls.items():
        kubectl("create", "namespace", "tokens")
        kubectl("-n", "tokens", "create", "serviceaccount", "tenant")
        done = kubectl(
            "-n", "tokens", "create", "token", "tenant", "--duration=1h", "--audience=api://x"
        )
        assert done.returncode == 0, (name, done.stderr)
        assert done.stdout.strip().count(".") == 2  # a JWT


def test_protobuf_bodies_that_cannot_be_read(
    servers: exchanges.Servers, local_kube_api: LocalKubeAPI
) -> None:
    protobuf = "application/vnd.kubernetes.protobuf"
    garbage = b"k8s\x00garbage"
    path = "/api/v1/namespaces/default/configmaps"
    servers.request("POST", path, data=garbage, content_type=protobuf).agree(400, "BadRequest")
    # A custom resource has no protobuf form; the local API says so with 415 (a real
    # kube-apiserver 1.37.2 drops the connection: its handler panics, so no answer to compare).
    type_meta = _message(1, b"eventhub-balancer.dev/v1alpha1") + _message(2, b"EventHubConsumer")
    ehcs = "/apis/eventhub-balancer.dev/v1alpha1/namespaces/default/eventhubconsumers"
    wire = servers.local
    refused = wire.request(
        "POST", ehcs, data=b"k8s\x00" + _message(1, type_meta), content_type=protobuf
    )
    assert (refused.status, refused.reason) == (415, "UnsupportedMediaType")
    # A field the local API cannot decode is refused whole, never dropped (a real server
    # knows every field of its kinds; the local API knows those kubectl's commands fill).
    config_map = _message(1, b"v1") + _message(2, b"ConfigMap")
    unknown_field = _message(1, _message(1, b"c")) + _message(15, b"surprise")
    body = b"k8s\x00" + _message(1, config_map) + _message(2, unknown_field)
    refused = wire.request("POST", path, data=body, content_type=protobuf)
    assert (refused.status, refused.reason) == (415, "UnsupportedMediaType"), refused
    assert "field 15 of ConfigMap" in refused.message
    assert local_kube_api.get_object("v1/configmaps", "c", namespace="default") is None


def _message(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (short payloads only)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


@pytest.mark.parametrize("path", ["ehc", "ehc.spec", "ehc.spec.startPosition", "ehc.status"])
def test_kubectl_explain_prints_what_a_real_server_serves(
    kubectls: dict[str, Kubectl], path: str
) -> None:
    """A real server publishes a custom resource's apiVersion, kind and metadata in the words
    of every kind (metadata an ObjectMeta), whatever the CRD says of them; the rest is the
    CRD's schema."""
    # A real server publishes a new CRD's schema within a few seconds of its start.
    deadline = time.monotonic() + OPENAPI_TIMEOUT_S
    while (real := kubectls["real"]("explain", path)).returncode != 0:
        assert time.monotonic() < deadline, real.stderr
        time.sleep(0.5)
    local = kubectls["local"]("explain", path)
    assert local.returncode == 0, local.stderr
    assert local.stdout == real.stdout
