"""The example project released with real Helm onto the real control plane, both charts.

Where tests/install/wire/test_example_release.py applies the consumer chart to the local API
and runs the operator in-process, here everything goes as on a cluster: `helm install` of the
operator chart and of the consumer chart (examples/orders/values.yaml) against the real
kube-apiserver, the real controller-manager making both Deployments' ReplicaSets and Pods, and
the local node running every pod as a process with its own ServiceAccount's bound token: the
operator under the chart's RBAC and nothing else, the consumers under theirs. Every order sent
is processed and checkpointed.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from eventhub_balancer_devstack import deployments
from eventhub_balancer_devstack.realkube import RealControlPlane, nodes
from tests.install import test_consumer_chart as consumer_chart
from tests.install.wire.test_example_release import (
    ORDERS_PER_PARTITION,
    example_values,
    handler_records,
    order,
    orders_processed,
    wait_for_last_checkpoints,
)
from tests.install.wire.test_example_release import image as image  # the fixture
from tests.support import charts, loading
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = consumer_chart.NAMESPACE
#: Pods start (two Python processes and the operator), get their partitions and drain 600
#: small events; a loaded 2-core machine needs the margin.
WAIT_S = 90.0
#: The operator's release: its chart's defaults, plus the development endpoints the local
#: emulators are, and the consumer's namespace opted in for its Secret reads.
OPERATOR_VALUES: dict[str, Any] = {
    "allowedEndpoints": {"development": True},
    "tenantNamespaces": [NAMESPACE],
}


def image_of(rendered: Mapping[str, str]) -> str:
    (deployment,) = [d for d in charts.documents(rendered) if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_the_example_releases_with_helm_onto_the_real_control_plane(
    image: Path,
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    real_kube: RealControlPlane,
    real_kubeconfig: Path,
    real_kubectl: Kubectl,
    local_node_factory: Callable[[Mapping[str, deployments.LocalImage]], nodes.LocalNode],
    tmp_path: Path,
) -> None:
    values = example_values()
    values["consumer"]["checkpointStore"]["containerName"] = blob_container.container_name
    consumer = consumer_chart.render(values)["EventHubConsumer"][0]
    eventhub, store = consumer["spec"]["eventHub"], consumer["spec"]["checkpointStore"]
    operator_image = image_of(
        charts.render(
            loading.CHART_DIR,
            OPERATOR_VALUES,
            name=loading.RELEASE,
            namespace=loading.RELEASE_NAMESPACE,
        )
    )
    consumer_image = image_of(
        charts.render(consumer_chart.CHART_DIR, values, name="orders", namespace=NAMESPACE)
    )
    runtime = (sys.executable, "-m", "eventhub_balancer")
    node = local_node_factory(
        {
            operator_image: deployments.LocalImage(entrypoint=runtime),
            consumer_image: deployments.LocalImage(
                entrypoint=runtime, env={"PYTHONPATH": str(image)}
            ),
        }
    )
    env = {"KUBECONFIG": str(real_kubeconfig), "HOME": str(tmp_path)}

    # The tenant's namespace first: the operator's release binds its tenant role there.
    real_kubectl("create", "namespace", NAMESPACE)
    charts.helm(
        "install", loading.RELEASE, str(loading.CHART_DIR),
        "--namespace", loading.RELEASE_NAMESPACE, "--create-namespace", "--wait=false",
        values=OPERATOR_VALUES, env=env,
    )  # fmt: skip
    for ref, value in (
        (
            eventhub["credentials"]["connectionStringSecretRef"],
            consumer_emulator.connection_string(),
        ),
        (store["credentials"]["connectionStringSecretRef"], azurite.connection_string),
    ):
        # As the values' comments say, with kubectl's own default (protobuf) body.
        real_kubectl("-n", NAMESPACE, "create", "secret", "generic", ref["name"],
                     f"--from-literal={ref['key']}={value}")  # fmt: skip
    charts.helm(
        "install", "orders", str(consumer_chart.CHART_DIR), "--namespace", NAMESPACE,
        "--set", "extraEnv[0].name=EHB_ALLOW_DEVELOPMENT_ENDPOINTS",
        "--set-string", "extraEnv[0].value=true",
        values=values, env=env,
    )  # fmt: skip
    asyncio.run(
        send_events(
            consumer_emulator.connection_string(),
            eventhub["name"],
            dict.fromkeys(["0", "1", "2", "3"], ORDERS_PER_PARTITION),
            body=order,
        )
    )
    wait_for_last_checkpoints(azurite, store, eventhub, timeout=WAIT_S)
    pods = real_kube.list_objects("v1/pods", namespace=NAMESPACE)
    names = {p["metadata"]["name"] for p in pods}
    assert len(names) == values["replicaCount"] == 2
    assert all(p["spec"]["nodeName"] == node.name for p in pods)
    (operator,) = real_kube.list_objects("v1/pods", namespace=loading.RELEASE_NAMESPACE)
    assert operator["spec"]["serviceAccountName"] == f"{loading.RELEASE}-eventhub-balancer"
    records = handler_records(node.log_dir)
    assert orders_processed(records) == 4 * ORDERS_PER_PARTITION
    assert {r["partition"] for r in records} == {"0", "1", "2", "3"}
    assert {r["pod"] for r in records} == names
