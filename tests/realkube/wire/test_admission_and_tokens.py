"""The install's CRD and admission policies on the real API server, and TokenRequest.

Applied with the real kubectl, the CRD serves ``kubectl explain`` and the policies' CEL is
type-checked by the real server without a warning. Then the tenancy defences of
tests/install/wire/test_admission_over_the_wire.py are tried again, this time with real pods,
real bound tokens from TokenRequest and the real ValidatingAdmissionPolicy evaluator: a pod
forges no assignment and acknowledges only as itself, its own namespace and incarnation.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import kubernetes
import pytest
import yaml

from eventhub_balancer.adapters import kubeclients
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers import kopfwiring
from eventhub_balancer_devstack.kube import identities
from eventhub_balancer_devstack.realkube import RealControlPlane, tokens
from tests.install.wire.test_admission_over_the_wire import (
    acknowledgement,
    assignment,
    refused,
    victim_labels,
)
from tests.support import loading, paths
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = "shop"
ELSEWHERE = "evil"
#: A node no kubelet runs: the pods here exist for their identities only.
NOWHERE = "no-node"
#: The real server type-checks a policy a moment after it is written.
TYPECHECK_WAIT_S = 30.0


def pod(kube: RealControlPlane, namespace: str, name: str, account: str) -> identities.PodIdentity:
    created = kube.create_object(
        "v1/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "serviceAccountName": account,
                "nodeName": NOWHERE,
                "containers": [{"name": "consumer", "image": "local/none"}],
            },
        },
        namespace=namespace,
    )
    return identities.PodIdentity(
        namespace=namespace,
        service_account=account,
        pod_name=name,
        pod_uid=created["metadata"]["uid"],
    )


def consumer_role(namespace: str, account_namespace: str, account: str) -> list[dict[str, Any]]:
    """What a consumer pod may do with ConfigMaps, as the consumer chart grants it."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": f"consumer-{account}", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["get", "list", "watch", "patch", "update", "create"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"consumer-{account}", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"consumer-{account}",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": account_namespace}
            ],
        },
    ]


@pytest.fixture(scope="module")
def installed(real_kube: RealControlPlane, real_kubectl: Kubectl) -> RealControlPlane:
    real_kubectl("apply", "-f", str(paths.REPOSITORY / "crds"))
    real_kubectl("apply", "-f", str(loading.MANIFESTS_DIR / "install" / "50-admission-policy.yaml"))
    for namespace in (NAMESPACE, ELSEWHERE):
        real_kubectl("create", "namespace", namespace)
    for namespace, account in ((NAMESPACE, "orders-consumer"), (ELSEWHERE, "x")):
        real_kubectl("-n", namespace, "create", "serviceaccount", account)
    documents = consumer_role(NAMESPACE, NAMESPACE, "orders-consumer") + consumer_role(
        NAMESPACE, ELSEWHERE, "x"
    )
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))
    return real_kube


def test_the_crd_explains_and_the_policies_type_check_clean(
    installed: RealControlPlane, real_kubectl: Kubectl
) -> None:
    # The server publishes a new CRD's OpenAPI a moment after it is Established.
    deadline = time.monotonic() + TYPECHECK_WAIT_S
    while True:
        explained = real_kubectl("explain", "eventhubconsumer.spec.balancing", check=False)
        if explained.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "intervalSeconds" in explained.stdout, explained.stderr
    policies = [
        d.name
        for d in loading.file_documents(loading.MANIFESTS_DIR / "install")
        if d.kind == "ValidatingAdmissionPolicy"
    ]
    assert policies
    deadline = time.monotonic() + TYPECHECK_WAIT_S
    for name in policies:
        while True:
            body = installed.get_object(
                "admissionregistration.k8s.io/v1/validatingadmissionpolicies", name
            )
            status = (body or {}).get("status") or {}
            if status.get("observedGeneration") == (body or {})["metadata"]["generation"]:
                break
            assert time.monotonic() < deadline, f"{name} was never type-checked"
            time.sleep(0.2)
        warnings = (status.get("typeChecking") or {}).get("expressionWarnings") or []
        assert warnings == [], f"{name}: {warnings}"


@pytest.fixture(scope="module")
def as_pod(
    installed: RealControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., Any]:
    folder = tmp_path_factory.mktemp("pods")

    def make(identity: identities.PodIdentity) -> Any:
        path = installed.write_kubeconfig(
            folder / f"{identity.namespace}-{identity.pod_name}-{identity.pod_uid}",
            identity=identity,
        )
        return kubernetes.client.CoreV1Api(
            kubernetes.config.new_client_from_config(config_file=str(path))
        )

    return make


def test_a_pod_forges_no_assignment_and_acknowledges_only_as_itself(
    installed: RealControlPlane, as_pod: Callable[..., Any]
) -> None:
    attacker = pod(installed, NAMESPACE, "orders-0", "orders-consumer")
    victim = pod(installed, NAMESPACE, "orders-1", "orders-consumer")
    for who in (attacker, victim):
        installed.create_object(
            "v1/configmaps", assignment(who.pod_name, who.pod_uid), namespace=NAMESPACE
        )
    installed.create_object(
        "v1/configmaps",
        {"metadata": {"name": "innocent-config", "labels": {"app": "orders"}}, "data": {"a": "1"}},
        namespace=NAMESPACE,
    )
    core = as_pod(attacker)
    # The real server enforces a policy once its admission plugin has loaded it, a moment
    # after it was written: wait for a dry run (checked, never stored) to be refused.
    deadline = time.monotonic() + TYPECHECK_WAIT_S
    while True:
        try:
            core.patch_namespaced_config_map(
                "innocent-config",
                NAMESPACE,
                {"metadata": {"labels": victim_labels()}},
                dry_run="All",
            )
        except kubernetes.client.ApiException:
            break
        assert time.monotonic() < deadline, "the admission policies were never enforced"
        time.sleep(0.2)
    # A user's ConfigMap cannot be made into another pod's assignment, nor one forged.
    message = refused(
        lambda: core.patch_namespaced_config_map(
            "innocent-config", NAMESPACE, {"metadata": {"labels": victim_labels()}}
        )
    )
    assert "only the eventhub-balancer operator sets the labels" in message
    forged = {
        "metadata": {"name": "forged", "labels": victim_labels()},
        "data": {"consumer": "orders", "pod": victim.pod_name, "partitions": '{"0":{"epoch":9}}'},
    }
    refused(lambda: core.create_namespaced_config_map(NAMESPACE, forged))
    core.patch_namespaced_config_map("innocent-config", NAMESPACE, {"data": {"a": "2"}})
    # No assignment data, even its own.
    steal = {"data": {"partitions": '{"0":{"epoch":9223372036854775807,"state":"owned"}}'}}
    for who in (attacker, victim):
        name = configmaps.configmap_name(consumer="orders", pod=who.pod_name)
        refused(lambda name=name: core.patch_namespaced_config_map(name, NAMESPACE, steal))
    # Its own acknowledgement only.
    own = configmaps.configmap_name(consumer="orders", pod=attacker.pod_name)
    core.patch_namespaced_config_map(own, NAMESPACE, acknowledgement())
    victims = configmaps.configmap_name(consumer="orders", pod=victim.pod_name)
    refused(lambda: core.patch_namespaced_config_map(victims, NAMESPACE, acknowledgement()))
    # A pod of the same name in another namespace, let in by a RoleBinding.
    namesake = pod(installed, ELSEWHERE, attacker.pod_name, "x")
    message = refused(
        lambda: as_pod(namesake).patch_namespaced_config_map(own, NAMESPACE, acknowledgement())
    )
    assert "its own namespace" in message
    # The same name in the same namespace, but the next incarnation (another uid).
    installed.calls.delete(
        "v1/pods", attacker.pod_name, namespace=NAMESPACE, grace_period_seconds=0
    )
    deadline = time.monotonic() + TYPECHECK_WAIT_S
    while installed.get_object("v1/pods", attacker.pod_name, namespace=NAMESPACE) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    successor = pod(installed, NAMESPACE, attacker.pod_name, "orders-consumer")
    assert successor.pod_uid != attacker.pod_uid
    message = refused(
        lambda: as_pod(successor).patch_namespaced_config_map(own, NAMESPACE, acknowledgement())
    )
    assert "its own pod uid" in message


def test_token_request_for_a_tenants_service_account(
    installed: RealControlPlane, tmp_path: Path
) -> None:
    """What the operator asks for a tenant's workload identity: a token of the tenant's
    ServiceAccount for Entra ID's audience, which the real server signs and reviews."""
    answer = installed.calls.call(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/orders-consumer/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": ["api://AzureADTokenExchange"], "expirationSeconds": 600},
        },
    )
    token = answer["status"]["token"]
    review = installed.calls.call(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": ["api://AzureADTokenExchange"]},
        },
    )
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == (
        f"system:serviceaccount:{NAMESPACE}:orders-consumer"
    )
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==").decode())
    assert claims["aud"] == ["api://AzureADTokenExchange"]
    assert claims["iss"] == installed.url


def test_a_namespace_user_creates_no_configmap_the_operator_would_keep(
    installed: RealControlPlane, real_kubectl: Kubectl, tmp_path: Path
) -> None:
    """A person with the usual rights on a tenant namespace's ConfigMaps (not a ServiceAccount)
    makes no ConfigMap the operator's watch takes in: each one it lists, keeps and re-lists,
    so a few hundred of them at 1 MB each took the shared operator past its memory limit,
    every tenant's balancing with it."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tenant-edit", "namespace": NAMESPACE},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get", "list", "create", "update", "patch", "delete"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tenant-edit", "namespace": NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dev"}],
    }
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    path = installed.client_kubeconfig(tmp_path / "dev", user="dev", groups=("developers",))
    core = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(path))
    )
    managed = {configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY}
    junk = {"metadata": {"name": "junk", "labels": managed}, "data": {"x": "a" * 900_000}}
    # The policies are enforced a moment after they are written: wait for a dry run to fail.
    deadline = time.monotonic() + TYPECHECK_WAIT_S
    while True:
        try:
            core.create_namespaced_config_map(NAMESPACE, junk, dry_run="All")
        except kubernetes.client.ApiException as e:
            if e.status != 403 or "denied request" not in (e.body or ""):
                raise
            break
        assert time.monotonic() < deadline, "a person may create a ConfigMap the operator keeps"
        time.sleep(0.2)
    message = refused(lambda: core.create_namespaced_config_map(NAMESPACE, junk))
    assert "only the eventhub-balancer operator sets the labels" in message
    core.create_namespaced_config_map(
        NAMESPACE, {"metadata": {"name": "plain", "labels": {"app": "orders"}}, "data": {"a": "1"}}
    )
    refused(
        lambda: core.patch_namespaced_config_map(
            "plain", NAMESPACE, {"metadata": {"labels": managed}}
        )
    )
    # Its own ConfigMaps stay its own, and so does what it may do to the operator's.
    core.patch_namespaced_config_map("plain", NAMESPACE, {"data": {"a": "2"}})
    core.delete_namespaced_config_map("plain", NAMESPACE)


def test_an_operator_in_a_pod_logs_kopf_in_as_its_serviceaccount(
    installed: RealControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod, the operator's client loads the mounted ServiceAccount token, and kopf's
    login is given it (`kopfwiring.kopf_connection`). kopf's header, sent to the real server,
    is that ServiceAccount: it was ``Bearer bearer <token>``, refused with 401
    (tests/adapters/test_kube_logins.py)."""
    admin = yaml.safe_load(installed.write_kubeconfig(tmp_path / "admin").read_text())
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"]))
    token = tmp_path / "token"
    token.write_text(
        tokens.service_account_token(installed.calls, namespace=NAMESPACE, name="orders-consumer")
    )
    monkeypatch.setattr(kubernetes.config.incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(kubernetes.config.incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    address = urllib.parse.urlsplit(installed.url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(address.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(address.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    client = kubeclients.KubeClient.from_environment()
    try:
        info = kopfwiring.kopf_connection(client.connection_info())
    finally:
        client.close()

    async def review() -> tuple[int, dict[str, Any]]:
        # As kopf's API context makes its session (kopf/_cogs/clients/auth.py).
        async with (
            aiohttp.ClientSession(
                base_url=info.server,
                headers=info.as_http_headers(),
                connector=aiohttp.TCPConnector(ssl=info.as_ssl_context()),
                timeout=aiohttp.ClientTimeout(total=30),
            ) as session,
            session.post(
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            ) as answer,
        ):
            return answer.status, await answer.json(content_type=None)

    status, body = asyncio.run(review())
    assert status == 201, body
    assert body["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{NAMESPACE}:orders-consumer"
    )
