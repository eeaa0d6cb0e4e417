"""The docs' `helm upgrade` commands, run as written against a release of an older chart.

A release is installed as docs/install.md installs it (`helm install ... --set
image.repository=<your registry>`), from the chart as it was before a value was added (a copy
of charts/eventhub-balancer without `networkPolicy`, as the chart had before that value came):
then each `helm upgrade` of docs/install.md and docs/operations.md runs as the page writes it.
Each must succeed with the new chart's defaults for the new value, and keep what the user set
at install: an operator image reverted to the chart's default name cannot be pulled, and the
standalone operator is stopped before its replacement starts.

Two Helm behaviours make this fail, both silent in a test on one chart version:
`--reuse-values` renders the new templates with the old chart's defaults (a value the chart
added is missing, and the template stops on a nil pointer), and `--set` without any reuse
flag drops every value given at install.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.support import charts, loading
from tests.support.fixtures.realkube import Kubectl, helm_environment, make_kubectl

RELEASE = "eventhub-balancer"
#: What docs/install.md's install sets, and every upgrade must keep.
REGISTRY_IMAGE = "myregistry.azurecr.io/eventhub-balancer-operator"
#: The value the older chart lacks.
NEW_VALUE = "networkPolicy"
#: The documents' placeholders, as a user fills them in.
PLACEHOLDERS = {"<new version>": "0.1.1", "<client id>": "00000000-0000-0000-0000-000000000001"}


def documented(page: str, verb: str) -> list[list[str]]:
    """The `helm <verb> eventhub-balancer ...` commands of a docs page's sh blocks."""
    text = (loading.ROOT / "docs" / page).read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip()
            if line.startswith(f"helm {verb} ") and f" {RELEASE} " in line:
                for placeholder, value in PLACEHOLDERS.items():
                    line = line.replace(placeholder, value)
                commands.append(shlex.split(line))
    return commands


UPGRADES = documented("install.md", "upgrade") + documented("operations.md", "upgrade")


def older_chart(folder: Path) -> Path:
    """charts/eventhub-balancer as a previous version: without NEW_VALUE and its template."""
    chart = folder / "eventhub-balancer"
    shutil.copytree(loading.CHART_DIR, chart)
    (chart / "templates" / "networkpolicy.yaml").unlink()
    values = yaml.safe_load((chart / "values.yaml").read_text())
    del values[NEW_VALUE]
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    schema = json.loads((chart / "values.schema.json").read_text())
    del schema["properties"][NEW_VALUE]
    (chart / "values.schema.json").write_text(json.dumps(schema))
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "0.0.9"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    return chart


@pytest.fixture(scope="module")
def api(bare_real_kube: RealControlPlane) -> RealControlPlane:
    return bare_real_kube


@pytest.fixture(scope="module")
def helm_env(api: RealControlPlane, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return helm_environment(api, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def kubectl(helm_env: dict[str, str]) -> Kubectl:
    run = make_kubectl(Path(helm_env["KUBECONFIG"]))
    # docs/install.md: the peering CRDs go in once, before replicaCount=2 with peering; the
    # monitoring upgrade of docs/operations.md needs the Prometheus Operator's kinds.
    run("apply", "-f", str(loading.ROOT / "manifests" / "peering" / "kopf-peering-crds.yaml"))
    run("apply", "-f", "-", input=json.dumps(prometheus_operator_crds()))
    return run


def prometheus_operator_crds() -> dict[str, Any]:
    """ServiceMonitor and PrometheusRule, as kube-prometheus-stack serves them (their fields
    unchecked: only the kinds matter to Helm here)."""
    crds = []
    for kind, plural in (
        ("ServiceMonitor", "servicemonitors"),
        ("PrometheusRule", "prometheusrules"),
    ):
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.monitoring.coreos.com"},
                "spec": {
                    "group": "monitoring.coreos.com",
                    "scope": "Namespaced",
                    "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    ],
                },
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": crds}


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return older_chart(tmp_path_factory.mktemp("previous"))


def install_previous(chart: Path, env: dict[str, str]) -> None:
    """docs/install.md's `helm install`, with the older chart in place of charts/."""
    (install,) = documented("install.md", "install")
    install = [str(chart) if a == "charts/eventhub-balancer" else a for a in install]
    assert "image.repository=" + REGISTRY_IMAGE in install
    charts.helm(*install[1:], env=env, cwd=loading.ROOT)


def operator_deployment(api: RealControlPlane) -> dict[str, Any]:
    found = api.get_object("apps/v1/deployments", RELEASE, namespace=loading.RELEASE_NAMESPACE)
    assert found is not None
    return found


def test_the_docs_upgrade_an_operator_release() -> None:
    """The pages hold the commands this module runs: an upgrade of the image, of peering, of
    the workload identity, of the monitoring."""
    assert len(UPGRADES) == 4
    assert any("image.tag=0.1.1" in c for c in UPGRADES)
    assert any("peering.enabled=true" in c for c in UPGRADES)
    assert any("serviceMonitor.enabled=true" in c for c in UPGRADES)


def setting(command: list[str]) -> str:
    """What an upgrade sets, as its test's id."""
    return ",".join(b for a, b in itertools.pairwise(command) if a.startswith("--set"))


@pytest.mark.parametrize("command", UPGRADES, ids=setting)
def test_a_documented_upgrade_from_the_previous_chart_keeps_the_install(
    api: RealControlPlane,
    helm_env: dict[str, str],
    kubectl: Kubectl,
    previous: Path,
    command: list[str],
) -> None:
    installed = charts.helm("list", "-n", loading.RELEASE_NAMESPACE, "-q", env=helm_env).split()
    if RELEASE in installed:
        charts.helm("uninstall", RELEASE, "-n", loading.RELEASE_NAMESPACE, env=helm_env)
    install_previous(previous, helm_env)
    assert (
        api.get_object(
            "networking.k8s.io/v1/networkpolicies", RELEASE, namespace=loading.RELEASE_NAMESPACE
        )
        is None
    )

    charts.helm(*command[1:], env=helm_env, cwd=loading.ROOT)

    (container,) = operator_deployment(api)["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith(REGISTRY_IMAGE + ":"), container["image"]
    # The value the new chart added takes its default: the NetworkPolicy exists now.
    assert (
        api.get_object(
            "networking.k8s.io/v1/networkpolicies", RELEASE, namespace=loading.RELEASE_NAMESPACE
        )
        is not None
    )
    # Helm never deletes a chart's crds/: the EventHubConsumers outlive every revision.
    assert (
        api.get_object(
            "apiextensions.k8s.io/v1/customresourcedefinitions",
            "eventhubconsumers.eventhub-balancer.dev",
        )
        is not None
    )
