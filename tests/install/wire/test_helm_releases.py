"""Both charts installed, upgraded and rolled back by the real `helm` on a live API server.

The server is the real control plane (etcd, kube-apiserver, kube-controller-manager), started
without CRDs so that `helm install` of the operator chart installs the EventHubConsumer CRD
from the chart's crds/, as it does on a cluster. The local API cannot take Helm: Helm's client
reads the OpenAPI document as protobuf and sends protobuf bodies, which it does not speak. The
`api` fixture is the one place that says which server: a server that can would be one change.

What each release does is read back from the server, not from Helm's report: the Deployment's
arguments after an upgrade and after a rollback, the EventHubConsumer's spec, and, from the
controller manager's aggregation, the built-in edit and view roles that now cover
EventHubConsumers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.support import charts, loading
from tests.support.fixtures.operator import wait_for
from tests.support.fixtures.realkube import Kubectl, helm_environment, make_kubectl

CONSUMER_CHART = loading.ROOT / "charts" / "eventhub-consumer"
OPERATOR = "ehb"
CONSUMER_NAMESPACE = "shop"
HUB = {"consumer": {"eventHub": {"fullyQualifiedNamespace": "shop.servicebus.windows.net"}}}
#: The longest wait for the controller manager to fold the aggregated roles in (it does in
#: well under a second on an idle machine).
AGGREGATION_WAIT_S = 30.0


@pytest.fixture(scope="module")
def api(bare_real_kube: RealControlPlane) -> RealControlPlane:
    """The live API server the releases go to, with no CRD installed yet."""
    return bare_real_kube


@pytest.fixture(scope="module")
def helm_env(api: RealControlPlane, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return helm_environment(api, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def kubectl(helm_env: dict[str, str]) -> Kubectl:
    return make_kubectl(Path(helm_env["KUBECONFIG"]))


@pytest.fixture(scope="module")
def operator_release(helm_env: dict[str, str]) -> str:
    """The operator chart installed with its defaults: its NOTES, as helm printed them."""
    return charts.helm(
        "install",
        OPERATOR,
        str(loading.CHART_DIR),
        "--namespace",
        loading.RELEASE_NAMESPACE,
        "--create-namespace",
        env=helm_env,
    )


def history(release: str, namespace: str, env: dict[str, str]) -> list[tuple[int, str, str]]:
    """(revision, status, description) of each revision, oldest first."""
    shown = charts.helm("history", release, "--namespace", namespace, "-o", "json", env=env)
    return [(h["revision"], h["status"], h["description"]) for h in json.loads(shown)]


def operator_args(api: RealControlPlane) -> list[str]:
    deployment = api.get_object(
        "apps/v1/deployments", "ehb-eventhub-balancer", namespace=loading.RELEASE_NAMESPACE
    )
    assert deployment is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args


def test_the_operator_chart_installs_its_crd_upgrades_and_rolls_back(
    api: RealControlPlane, helm_env: dict[str, str], operator_release: str
) -> None:
    assert "STATUS: deployed" in operator_release
    assert "It serves EventHubConsumers in every namespace." in operator_release
    crd = api.get_object(
        "apiextensions.k8s.io/v1/customresourcedefinitions",
        "eventhubconsumers.eventhub-balancer.dev",
    )
    assert crd is not None
    assert crd["metadata"].get("annotations", {}).get("meta.helm.sh/release-name") is None
    assert "-v" in operator_args(api)  # logVerbosity: 1, the chart's default

    charts.helm(
        "upgrade",
        OPERATOR,
        str(loading.CHART_DIR),
        "--namespace",
        loading.RELEASE_NAMESPACE,
        "--reuse-values",
        "--set",
        "logVerbosity=0,logFormat=json",
        env=helm_env,
    )
    upgraded = operator_args(api)
    assert "-v" not in upgraded
    assert "--log-format=json" in upgraded

    charts.helm("rollback", OPERATOR, "1", "--namespace", loading.RELEASE_NAMESPACE, env=helm_env)
    rolled_back = operator_args(api)
    assert "-v" in rolled_back
    assert "--log-format=text" in rolled_back
    assert history(OPERATOR, loading.RELEASE_NAMESPACE, helm_env) == [
        (1, "superseded", "Install complete"),
        (2, "superseded", "Upgrade complete"),
        (3, "deployed", "Rollback to 1"),
    ]


def consumer(api: RealControlPlane) -> dict[str, Any]:
    found = api.get_object(
        "eventhub-balancer.dev/v1alpha1/eventhubconsumers",
        "orders-eventhub-consumer",
        namespace=CONSUMER_NAMESPACE,
    )
    assert found is not None
    return found


def test_the_consumer_chart_installs_upgrades_and_rolls_back(
    api: RealControlPlane, helm_env: dict[str, str], operator_release: str
) -> None:
    """Installed beside the operator's release, whose CRD it needs."""
    release = ["orders", str(CONSUMER_CHART), "--namespace", CONSUMER_NAMESPACE]
    shown = charts.helm(
        "install",
        *release,
        "--create-namespace",
        "--set",
        "consumer.eventHub.fullyQualifiedNamespace=shop.servicebus.windows.net",
        "--set",
        "consumer.eventHub.name=orders",
        env=helm_env,
    )
    assert "The consumer orders-eventhub-consumer runs in namespace shop" in shown
    spec = consumer(api)["spec"]
    assert spec["eventHub"]["fullyQualifiedNamespace"] == "shop.servicebus.windows.net"
    assert spec["balancing"]["weighting"] == "count"  # the CRD's default, applied by the server

    charts.helm(
        "upgrade",
        *release,
        "--reuse-values",
        "--set",
        "consumer.balancing.weighting=lag",
        env=helm_env,
    )
    assert consumer(api)["spec"]["balancing"]["weighting"] == "lag"

    charts.helm("rollback", "orders", "1", "--namespace", CONSUMER_NAMESPACE, env=helm_env)
    assert consumer(api)["spec"]["balancing"]["weighting"] == "count"
    assert [h[1] for h in history("orders", CONSUMER_NAMESPACE, helm_env)] == [
        "superseded",
        "superseded",
        "deployed",
    ]


def test_a_consumer_install_without_its_hub_fails_and_leaves_nothing(
    api: RealControlPlane, helm_env: dict[str, str], operator_release: str
) -> None:
    with pytest.raises(charts.HelmError, match=r"consumer\.eventHub\.name is required"):
        charts.helm(
            "install",
            "nohub",
            str(CONSUMER_CHART),
            "--namespace",
            CONSUMER_NAMESPACE,
            "--create-namespace",
            values=HUB,
            env=helm_env,
        )
    listed = charts.helm("list", "--namespace", CONSUMER_NAMESPACE, "-q", env=helm_env).split()
    assert "nohub" not in listed
    assert not api.list_objects(
        "apps/v1/deployments",
        namespace=CONSUMER_NAMESPACE,
        label_selector="app.kubernetes.io/instance=nohub",
    )


def rules_of(api: RealControlPlane, role: str) -> list[dict[str, Any]]:
    found = api.get_object("rbac.authorization.k8s.io/v1/clusterroles", role)
    assert found is not None
    rules: list[dict[str, Any]] = found.get("rules") or []
    return rules


def covers(rules: list[dict[str, Any]], verb: str) -> bool:
    return any(
        "eventhubconsumers" in r.get("resources", []) and verb in r.get("verbs", []) for r in rules
    )


def can_i(kubectl: Kubectl, user: str, verb: str, resource: str, *extra: str) -> bool:
    done = kubectl(
        "auth", "can-i", verb, resource, "-n", CONSUMER_NAMESPACE, "--as", user, *extra, check=False
    )
    return done.stdout.strip() == "yes"


def test_the_built_in_edit_and_view_roles_gather_eventhubconsumers(
    api: RealControlPlane, kubectl: Kubectl, operator_release: str
) -> None:
    """The controller manager folds the chart's aggregated roles into edit, view and admin;
    a user bound to edit may change an EventHubConsumer but never its status."""
    wait_for(
        lambda: covers(rules_of(api, "edit"), "create") and covers(rules_of(api, "view"), "watch"),
        timeout=AGGREGATION_WAIT_S,
        what="edit and view gathering the EventHubConsumer roles",
    )
    assert covers(rules_of(api, "admin"), "delete")
    assert not covers(rules_of(api, "view"), "create")
    kubectl("create", "namespace", CONSUMER_NAMESPACE, check=False)
    for user, role in (("alice", "edit"), ("bob", "view")):
        kubectl(
            "create",
            "rolebinding",
            f"{user}-{role}",
            f"--clusterrole={role}",
            f"--user={user}",
            "-n",
            CONSUMER_NAMESPACE,
        )
    assert can_i(kubectl, "alice", "create", "eventhubconsumers.eventhub-balancer.dev")
    assert can_i(kubectl, "alice", "delete", "eventhubconsumers.eventhub-balancer.dev")
    assert not can_i(
        kubectl, "alice", "patch", "eventhubconsumers.eventhub-balancer.dev", "--subresource=status"
    )
    assert can_i(kubectl, "bob", "list", "eventhubconsumers.eventhub-balancer.dev")
    assert not can_i(kubectl, "bob", "patch", "eventhubconsumers.eventhub-balancer.dev")
