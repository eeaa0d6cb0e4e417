"""The operator's /metrics on a real API server: Prometheus reads them, a tenant does not.

The real ``ehb operator`` runs as its install's ServiceAccount (manifests/install's RBAC, with
``create`` on tokenreviews and subjectaccessreviews) against a real kube-apiserver, its metrics
on HTTPS. Each caller presents a token of its own ServiceAccount, as a pod would: Prometheus'
(bound to eventhub-balancer-metrics-reader) gets the page; a tenant's gets 403, no token 401;
the kubelet's probe of /healthz needs none. Reviews are kept as controller-runtime keeps them:
a second scrape costs the API server nothing.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import yaml

from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.support import loading, operatorcommands
from tests.support.fixtures.realkube import Kubectl

OPERATOR = ("eventhub-balancer-system", "eventhub-balancer")
INSTALL = ("00-namespace.yaml", "10-serviceaccount.yaml", "20-rbac.yaml")
PROMETHEUS = ("monitoring", "prometheus")
TENANT = ("tenant-b", "reader")


@pytest.fixture(scope="module")
def installed(real_kube: RealControlPlane, real_kubectl: Kubectl) -> RealControlPlane:
    for name in INSTALL:
        real_kubectl("apply", "-f", str(loading.MANIFESTS_DIR / "install" / name))
    for namespace, name in (PROMETHEUS, TENANT):
        real_kubectl("create", "namespace", namespace)
        real_kubectl("-n", namespace, "create", "serviceaccount", name)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "prometheus-reads-eventhub-balancer"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "eventhub-balancer-metrics-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "namespace": PROMETHEUS[0], "name": PROMETHEUS[1]}],
    }
    real_kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
    return real_kube


@pytest.fixture(scope="module")
def operator(
    installed: RealControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[operatorcommands.StartedOperator]:
    """``ehb operator -A`` as its install's ServiceAccount, metrics secured as installed."""
    kubeconfig = installed.service_account_kubeconfig(
        tmp_path_factory.mktemp("operator") / "kubeconfig", namespace=OPERATOR[0], name=OPERATOR[1]
    )
    started = operatorcommands.start(kubeconfig, "-A", secure_metrics=True)
    try:
        yield started
    finally:
        started.stop()


def token(kube: RealControlPlane, namespace: str, name: str) -> str:
    """A token of the ServiceAccount for the API server's own audience, as a pod holds one."""
    answer = kube.calls.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


def scrape(port: int, path: str, bearer: str | None = None) -> tuple[int, str]:
    """GET over HTTPS, trusting the operator's self-signed certificate as the ServiceMonitor
    does (insecureSkipVerify): the token is what authenticates."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if bearer is not None:
        request.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=15) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_only_a_token_allowed_get_on_metrics_reads_them(
    installed: RealControlPlane, operator: operatorcommands.StartedOperator
) -> None:
    port = operator.metrics_port
    assert port is not None
    assert scrape(port, "/metrics")[0] == 401
    assert scrape(port, "/metrics", "not-a-token")[0] == 401
    status, body = scrape(port, "/metrics", token(installed, *TENANT))
    assert status == 403
    assert "system:serviceaccount:tenant-b:reader" in body
    assert "ehb_" not in body
    prometheus = token(installed, *PROMETHEUS)
    status, body = scrape(port, "/metrics", prometheus)
    assert status == 200, body
    assert "ehb_" in body
    # The kubelet's probes carry no token.
    assert scrape(port, "/healthz")[0] == 200
    # Kept as controller-runtime keeps them: the next scrape asks the API server nothing.
    assert operator.reviews is not None
    asked = operator.reviews.reviews
    assert scrape(port, "/metrics", prometheus)[0] == 200
    assert operator.reviews.reviews == asked
