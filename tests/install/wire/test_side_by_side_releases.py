"""Two releases of the operator chart in one cluster, each serving its own namespaces.

docs/install.md runs the operator once per cluster or once per set of namespaces
(`watchNamespaces`): two teams install a release each, in namespaces of their own. Each
release's admission policies exempt only its own operator's ServiceAccount; they covered every
namespace, so each release's policies took the other operator for a consumer pod and refused
every assignment ConfigMap it wrote ("consumer pods may not create or delete assignment
ConfigMaps"): installing the second team's release stopped the first team's balancing.

Both releases go to the real control plane with the real helm; each operator's writes, as
its own ServiceAccount, are read back from the API server's answer, and a ServiceAccount that
is neither operator still may not forge an assignment ConfigMap in either team's namespace.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.support import charts, loading
from tests.support.fixtures.realkube import Kubectl, helm_environment, make_kubectl

#: (release, its namespace, the namespace it serves) of each team.
TEAMS = (("team-a", "ehb-a", "shop-a"), ("team-b", "ehb-b", "shop-b"))
#: Another workload's ServiceAccount, allowed to edit ConfigMaps in both served namespaces.
OTHER = "someone-else"
#: How long the API server may take to load a new policy (well under a second when idle).
POLICY_WAIT_S = 30.0


@pytest.fixture(scope="module")
def api(bare_real_kube: RealControlPlane) -> RealControlPlane:
    return bare_real_kube


@pytest.fixture(scope="module")
def kubectl(api: RealControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """Both teams' releases installed as docs/install.md installs one, each serving its
    namespace, and another workload's ServiceAccount that may edit ConfigMaps there."""
    env = helm_environment(api, tmp_path_factory.mktemp("helm-home"))
    run = make_kubectl(Path(env["KUBECONFIG"]))
    for release, namespace, served in TEAMS:
        run("create", "namespace", served)
        charts.helm(
            "install", release, str(loading.CHART_DIR), "--namespace", namespace,
            "--create-namespace", "--set", f"watchNamespaces={{{served}}}", env=env,
        )  # fmt: skip
        run("-n", served, "create", "serviceaccount", OTHER)
        run(
            "-n", served, "create", "rolebinding", OTHER, "--clusterrole=edit",
            f"--serviceaccount={served}:{OTHER}",
        )  # fmt: skip
    return run


def assignment(namespace: str) -> dict[str, Any]:
    """An assignment ConfigMap as the operator creates it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmaps.configmap_name(consumer="orders", pod="orders-0"),
            "namespace": namespace,
            "labels": configmaps.labels(consumer="orders", pod="orders-0"),
            "annotations": {configmaps.ANNOTATION_POD_UID: "uid-0"},
        },
        "data": {"consumer": "orders", "pod": "orders-0", "generation": "1", "partitions": "{}"},
    }


def operator(release: str, namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{release}-eventhub-balancer"


def test_each_release_writes_its_namespaces_and_no_other_account_may(kubectl: Kubectl) -> None:
    # The policies are loaded once someone else's forgery is refused in both namespaces.
    for _, _, served in TEAMS:
        forged = json.dumps(assignment(served))
        deadline = time.monotonic() + POLICY_WAIT_S
        while True:
            done = kubectl(
                "--as", f"system:serviceaccount:{served}:{OTHER}", "create", "-f", "-",
                "--dry-run=server", input=forged, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                break
            assert time.monotonic() < deadline, f"no policy refused a forgery in {served}"
            time.sleep(0.5)
        assert "ValidatingAdmissionPolicy" in done.stderr, done.stderr

    for release, namespace, served in TEAMS:
        created = kubectl(
            "--as", operator(release, namespace), "create", "-f", "-", "-o", "json",
            input=json.dumps(assignment(served)), check=False,
        )  # fmt: skip
        assert created.returncode == 0, f"{release}'s operator refused: {created.stderr}"
        patched = kubectl(
            "--as", operator(release, namespace), "-n", served, "patch", "configmap",
            assignment(served)["metadata"]["name"], "--type", "merge",
            "-p", json.dumps({"data": {"generation": "2"}}), check=False,
        )  # fmt: skip
        assert patched.returncode == 0, f"{release}'s operator refused: {patched.stderr}"
