"""What the local kubelet runs for a Deployment: its args, environment, Secret volumes, probe
and grace period.

A Deployment body in (the consumer chart's rendering), a `kubelet.PodTemplate` out; Secret
values come from a dict instead of the API, and Secret volumes are written under a test's
directory.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack import deployments
from tests.install import test_consumer_chart as consumer_chart

IMAGE = deployments.LocalImage(entrypoint=("python", "-m", "eventhub_balancer"), env={"A": "1"})
SECRETS = {
    ("orders-eh", "connectionString"): "Endpoint=eh",
    ("orders-blob", "connectionString"): "blob",
}


def chart_deployment() -> dict[str, Any]:
    (deployment,) = consumer_chart.render(
        {"extraEnv": [{"name": "ORDERS_CURRENCY", "value": "EUR"}]}
    )["Deployment"]
    return copy.deepcopy(deployment)


def template(deployment: dict[str, Any], volume_dir: Path) -> Any:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return deployments.pod_template(
        deployment,
        images={container["image"]: IMAGE},
        secret_value=lambda name, key: SECRETS[(name, key)],
        node_env={"KUBECONFIG": "/k"},
        volume_dir=volume_dir,
    )


def test_the_pods_run_the_images_entry_point_with_the_containers_args_on_their_own_port(
    tmp_path: Path,
) -> None:
    deployment = chart_deployment()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    argv = template(deployment, tmp_path).command("orders-abc", 41234)
    assert argv[:3] == ["python", "-m", "eventhub_balancer"]
    expected = [
        "--port=41234" if a == f"--port={container['ports'][0]['containerPort']}" else a
        for a in container["args"]
    ]
    assert argv[3:] == expected
    assert "--port=41234" in argv


def test_the_environment_is_the_images_the_nodes_and_the_containers(tmp_path: Path) -> None:
    built = template(chart_deployment(), tmp_path)
    assert built.env["A"] == "1"
    assert built.env["KUBECONFIG"] == "/k"
    assert built.env["ORDERS_CURRENCY"] == "EUR"
    # The Secret volumes' files are written here, and the variables name them.
    eventhub = Path(built.env["EHB_EVENTHUB_CONNECTION_STRING_FILE"])
    blob = Path(built.env["EHB_BLOB_CONNECTION_STRING_FILE"])
    assert eventhub.read_text() == "Endpoint=eh"
    assert blob.read_text() == "blob"
    assert eventhub.is_relative_to(tmp_path)
    assert blob.is_relative_to(tmp_path)
    assert built.downward == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_UID": "metadata.uid",
    }


def test_labels_probe_and_grace_period_come_from_the_pod_template(tmp_path: Path) -> None:
    deployment = chart_deployment()
    pod = deployment["spec"]["template"]
    built = template(deployment, tmp_path)
    assert built.labels == pod["metadata"]["labels"]
    assert built.readiness_path == "/readyz"
    assert built.termination_grace_s == pod["spec"]["terminationGracePeriodSeconds"]
    assert built.name_prefix == deployment["metadata"]["name"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(image="elsewhere:1"), "no local image for elsewhere:1"),
        (lambda c: c.update(command=["sh"]), "containers[0].command"),
        (
            lambda c: c["env"].append(
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
            ),
            "fieldRef spec.nodeName is not served locally",
        ),
        (lambda c: c.pop("readinessProbe"), "readinessProbe"),
        (
            lambda c: c["volumeMounts"][-1].update(subPath="connection-string"),
            "volumes[checkpoint-store-credentials].secret: only items mounted as a whole",
        ),
    ],
)
def test_what_cannot_run_here_is_refused_by_name(change: Any, message: str, tmp_path: Path) -> None:
    deployment = chart_deployment()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    image = container["image"]
    change(container)
    with pytest.raises(deployments.UnrunnableSpec, match=re.escape(message)):
        deployments.pod_template(
            deployment,
            images={image: IMAGE},
            secret_value=lambda name, key: SECRETS[(name, key)],
            node_env={},
            volume_dir=tmp_path,
        )


def test_a_missing_secret_and_a_missing_key_are_told_apart_as_a_kubelet_tells_them() -> None:
    """A deleted Secret read "Secret orders-eh has no key connectionString", which sent the
    user to the key of a Secret that was not there."""
    with pytest.raises(deployments.UnrunnableSpec, match=r'^secret "orders-eh" not found$'):
        deployments.secret_key(None, namespace="shop", secret="orders-eh", key="cs")
    with pytest.raises(
        deployments.UnrunnableSpec, match=r"^couldn't find key cs in Secret shop/orders-eh$"
    ):
        deployments.secret_key(
            {"data": {"other": ""}}, namespace="shop", secret="orders-eh", key="cs"
        )
    body = {"data": {"cs": "RW5kcG9pbnQ9c2I6Ly94"}}
    assert deployments.secret_key(body, namespace="shop", secret="orders-eh", key="cs") == (
        "Endpoint=sb://x"
    )


def test_secret_volumes_are_written_again_when_their_secret_changes(tmp_path: Path) -> None:
    """Only the files whose Secret changed, each in one rename; a Secret gone leaves them."""
    spec = chart_deployment()["spec"]["template"]["spec"]
    values = dict(SECRETS)
    built = template(chart_deployment(), tmp_path)
    blob = Path(built.env["EHB_BLOB_CONNECTION_STRING_FILE"])
    eventhub = Path(built.env["EHB_EVENTHUB_CONNECTION_STRING_FILE"])

    def value(name: str, key: str) -> str:
        if (name, key) not in values:
            raise deployments.MissingSecret(f'secret "{name}" not found')
        return values[(name, key)]

    assert deployments.refresh_secret_volumes(spec, value, tmp_path) == []
    values[("orders-blob", "connectionString")] = "rotated"
    assert deployments.refresh_secret_volumes(spec, value, tmp_path) == [blob]
    assert (blob.read_text(), eventhub.read_text()) == ("rotated", "Endpoint=eh")
    assert sorted(p.name for p in blob.parent.iterdir()) == [blob.name]  # no partial file left
    del values[("orders-blob", "connectionString")]
    with pytest.raises(deployments.MissingSecret):
        deployments.refresh_secret_volumes(spec, value, tmp_path)
    assert blob.read_text() == "rotated"
