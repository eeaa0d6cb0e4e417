"""Both servers for the conformance tests: one real control plane and one local API a module.

A real control plane takes a few seconds to start, so each test module shares one
(``real_kube``, tests/support/fixtures/realkube.py) and one local API beside it; every test
works in a namespace of its own on both (``namespace``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.devstack.wire.conformance import exchanges

#: How long the real server's controllers may take to give a new namespace its default
#: ServiceAccount (without it, pods are refused); they take milliseconds.
SERVICE_ACCOUNT_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def local_kube_api() -> Iterator[LocalKubeAPI]:
    with LocalKubeAPI() as api:
        yield api


@pytest.fixture(scope="module")
def servers(
    real_kube: RealControlPlane,
    local_kube_api: LocalKubeAPI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[exchanges.Servers]:
    folder = tmp_path_factory.mktemp("kubeconfigs")
    local = exchanges.Wire(local_kube_api.write_kubeconfig(folder / "local"), name="local")
    real = exchanges.Wire(real_kube.write_kubeconfig(folder / "real"), name="real")
    yield exchanges.Servers(local=local, real=real)
    local.close()
    real.close()


def _namespace_name(test_name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", test_name.lower().removeprefix("test_")).strip("-")
    return cleaned[:63].rstrip("-") or "conformance"


@pytest.fixture
def namespace(servers: exchanges.Servers, request: pytest.FixtureRequest) -> str:
    """A fresh namespace on both servers, named after the test, once it has its default
    ServiceAccount (which a real server needs before it takes a pod)."""
    name = _namespace_name(request.node.name)
    servers.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}}).agree(201)
    deadline = time.monotonic() + SERVICE_ACCOUNT_TIMEOUT_S
    account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
    while servers.real.request("GET", account).status != 200:
        assert time.monotonic() < deadline, (
            f"no default ServiceAccount in {name} on the real server"
        )
        time.sleep(0.05)
    # The local API makes it with the namespace, as the real one's controller does at once.
    servers.request("GET", account).agree(200)
    return name
