"""What a compromised operator can still do with the default install, on the real API server.

``manifests/install/`` (namespace, ServiceAccount, RBAC, admission policies) is applied with
the real kubectl to a real kube-apiserver; then the operator's own ServiceAccount (a token of
it, as its pod holds one) tries what an attacker holding that token would: mint tokens of any
ServiceAccount (kube-system's, with the Kubernetes API's audience, long-lived, bound to a pod),
read any Secret. RBAC keeps Secrets and tokens to the namespaces that opted in (a RoleBinding to
``eventhub-balancer-tenant``); the admission policies keep tokens to ServiceAccounts that
opted in (their label) and to Microsoft Entra ID's audience, 10 minutes at most. The
operator's legitimate request, as `tenantidentities` makes it, passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from eventhub_balancer.adapters import tenantidentities
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.support import loading
from tests.support.fixtures.realkube import Kubectl

OPTED_IN, OTHER = "tenant-a", "tenant-b"
OPERATOR = ("eventhub-balancer-system", "eventhub-balancer")
#: How long a new policy, binding or param may take to reach the admission plugin.
POLICY_WAIT_S = 30.0
INSTALL = (
    "00-namespace.yaml",
    "10-serviceaccount.yaml",
    "20-rbac.yaml",
    "50-admission-policy.yaml",
)


def tenant_opt_in(namespace: str) -> dict[str, Any]:
    """What a namespace's admin (or the chart's tenantNamespaces) creates to opt in."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "eventhub-balancer-tenant", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "eventhub-balancer-tenant",
        },
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR[1], "namespace": OPERATOR[0]}],
    }


@pytest.fixture(scope="module")
def installed(real_kube: RealControlPlane, real_kubectl: Kubectl) -> RealControlPlane:
    for name in INSTALL:
        real_kubectl("apply", "-f", str(loading.MANIFESTS_DIR / "install" / name))
    for namespace in (OPTED_IN, OTHER):
        real_kubectl("create", "namespace", namespace)
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump(tenant_opt_in(OPTED_IN)))
    label = f"{tenantidentities.OPT_IN_LABEL}={tenantidentities.OPT_IN_VALUE}"
    for namespace in (OPTED_IN, OTHER, "kube-system"):
        real_kubectl("-n", namespace, "create", "serviceaccount", "reader")
        real_kubectl("-n", namespace, "label", "serviceaccount", "reader", label)
        real_kubectl("-n", namespace, "create", "serviceaccount", "bystander")
        real_kubectl("-n", namespace, "create", "secret", "generic", "keys", "--from-literal=k=v")
    return real_kube


@pytest.fixture(scope="module")
def as_operator(
    installed: RealControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> kubernetes.client.CoreV1Api:
    """The operator's own identity: a token of its ServiceAccount, as its pod holds one."""
    path = installed.service_account_kubeconfig(
        tmp_path_factory.mktemp("operator") / "kubeconfig",
        namespace=OPERATOR[0],
        name=OPERATOR[1],
    )
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(path)))


def token_request(
    core: kubernetes.client.CoreV1Api,
    namespace: str,
    name: str,
    *,
    audiences: list[str] | None = None,
    seconds: int = tenantidentities.TOKEN_SECONDS,
    bound: dict[str, Any] | None = None,
) -> Callable[[], Any]:
    spec: dict[str, Any] = {
        "audiences": [tenantidentities.AUDIENCE] if audiences is None else audiences,
        "expirationSeconds": seconds,
    }
    if bound is not None:
        spec["boundObjectRef"] = bound
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return lambda: core.create_namespaced_service_account_token(name, namespace, body)


def refused(call: Callable[[], Any]) -> str:
    """The API server's 403 message for ``call``."""
    with pytest.raises(ApiException) as raised:
        call()
    assert raised.value.status == 403, raised.value.body
    return str(raised.value.body)


def eventually_refused(call: Callable[[], Any]) -> str:
    """As `refused`, once a policy just written has reached the admission plugin."""
    deadline = time.monotonic() + POLICY_WAIT_S
    while True:
        try:
            call()
        except ApiException as e:
            failed = e
            break
        assert time.monotonic() < deadline, "the admission policy never refused"
        time.sleep(0.5)
    assert failed.status == 403, failed.body
    return str(failed.body)


def test_the_operators_own_token_request_passes(as_operator: kubernetes.client.CoreV1Api) -> None:
    answer = token_request(as_operator, OPTED_IN, "reader")()
    assert answer.status.token


def test_a_compromised_operator_mints_no_token_outside_the_opted_in_namespaces(
    as_operator: kubernetes.client.CoreV1Api,
) -> None:
    for namespace in ("kube-system", OTHER):
        for name in ("reader", "bystander", "default"):
            message = refused(token_request(as_operator, namespace, name))
            assert "cannot create resource" in message, message


def test_a_compromised_operator_mints_no_token_the_kubernetes_api_accepts(
    as_operator: kubernetes.client.CoreV1Api,
) -> None:
    message = eventually_refused(token_request(as_operator, OPTED_IN, "reader", audiences=[]))
    assert "eventhub-balancer-token-requests" in message
    assert "only for the audience api://AzureADTokenExchange" in message
    for audiences in (["https://kubernetes.default.svc"], [tenantidentities.AUDIENCE, "x"]):
        refused(token_request(as_operator, OPTED_IN, "reader", audiences=audiences))
    message = refused(token_request(as_operator, OPTED_IN, "reader", seconds=3600))
    assert "at most 10 minutes" in message
    pod = {"kind": "Pod", "apiVersion": "v1", "name": "x", "uid": "0000"}
    refused(token_request(as_operator, OPTED_IN, "reader", bound=pod))


def test_a_service_account_lends_nothing_without_its_opt_in(
    as_operator: kubernetes.client.CoreV1Api,
) -> None:
    message = eventually_refused(token_request(as_operator, OPTED_IN, "bystander"))
    assert "eventhub-balancer-token-opt-in" in message
    assert f"ServiceAccount {OPTED_IN}/bystander has not opted in" in message
    refused(token_request(as_operator, OPTED_IN, "default"))


def test_a_compromised_operator_reads_secrets_only_where_a_namespace_opted_in(
    as_operator: kubernetes.client.CoreV1Api,
) -> None:
    assert as_operator.read_namespaced_secret("keys", OPTED_IN).data == {"k": "dg=="}
    for namespace in ("kube-system", OTHER):
        refused(lambda namespace=namespace: as_operator.read_namespaced_secret("keys", namespace))
    # By name only: never listed, even where it may read one.
    refused(lambda: as_operator.list_namespaced_secret(OPTED_IN))
    refused(lambda: as_operator.list_secret_for_all_namespaces())
