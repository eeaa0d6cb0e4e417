"""What kopf's login is given: the header kopf sends is the one the operator's own client sends.

In a pod, the Kubernetes client loads the ServiceAccount token as ``bearer <token>`` (lower
case). The login took the whole value for the token and stripped only ``Bearer ``, so kopf sent
``Authorization: Bearer bearer <token>``, which kube-apiserver refuses with 401: an operator
installed in a cluster could not watch anything. No test ran the in-cluster loader; the local
stacks give every process a kubeconfig, whose token the client holds as ``Bearer <token>``.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes
import pytest

from eventhub_balancer.adapters import kubeclients
from eventhub_balancer.handlers import kopfwiring

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl"


@pytest.fixture
def in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The files and variables a kubelet gives a pod, with the token file in ``tmp_path``."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(TOKEN)
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(kubernetes.config.incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(kubernetes.config.incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return token


def test_in_a_pod_kopf_sends_the_serviceaccount_token_as_a_bearer_token(in_a_pod: Path) -> None:
    client = kubeclients.KubeClient.from_environment()
    try:
        info = kopfwiring.kopf_connection(client.connection_info())
    finally:
        client.close()
    assert info.server == "https://10.96.0.1:443"
    assert info.as_http_headers() == {"Authorization": f"Bearer {TOKEN}"}


def test_from_a_kubeconfig_kopf_sends_its_token(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        f"users: [{{name: u, user: {{token: {TOKEN}}}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    client = kubeclients.KubeClient.from_environment(str(path))
    try:
        info = kopfwiring.kopf_connection(client.connection_info())
    finally:
        client.close()
    assert info.as_http_headers() == {"Authorization": f"Bearer {TOKEN}"}


def test_each_login_takes_the_token_through_the_clients_refresh_hook() -> None:
    # The hook is how the client re-reads a token the kubelet rotated in its file (in a pod) or
    # renews an exec plugin's (kubeconfig): kopf logs in again after a 401, and must get the
    # new token, even when the operator's own client made no request since (a steady fleet).
    configuration = kubernetes.client.Configuration()
    configuration.host = "https://10.96.0.1:443"
    configuration.api_key["BearerToken"] = "bearer old"
    served = iter(["bearer first", "bearer rotated"])

    def refresh(c: kubernetes.client.Configuration) -> None:
        c.api_key["BearerToken"] = next(served)

    configuration.refresh_api_key_hook = refresh
    client = kubeclients.KubeClient(configuration)
    try:
        assert client.connection_info().token == "first"
        assert client.connection_info().token == "rotated"
    finally:
        client.close()


@pytest.mark.parametrize(
    ("header", "scheme", "token"),
    [
        ("bearer abc", "Bearer", "abc"),
        ("Bearer abc\n", "Bearer", "abc"),
        ("abc", None, "abc"),
        ("Negotiate xyz", "Negotiate", "xyz"),
        ("", None, None),
        (None, None, None),
    ],
)
def test_an_authorization_value_is_split_into_its_scheme_and_token(
    header: str | None, scheme: str | None, token: str | None
) -> None:
    assert kubeclients._authorization(header) == (scheme, token)
