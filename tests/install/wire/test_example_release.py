"""The example project installed as a new user installs it: a wheel, then one chart release.

examples/orders is built into a wheel (offline, with this virtualenv's setuptools) and the wheel
is installed into a directory of its own, which stands for the image: examples/orders/Dockerfile
installs the same wheel beside the runtime. charts/eventhub-consumer is rendered by `helm
template` with the example's values (examples/orders/values.yaml), the Secrets are created and the
rendering applied with the real kubectl against the local Kubernetes API, and the operator runs
on it. The local kubelet runs the pods that the applied Deployment describes
(eventhub_balancer_devstack.deployments): its args, Downward API and Secret variables, probe and
grace period. The operator gives the two pods the hub's four partitions; they process every order
sent to the Event Hubs emulator with the example handler, log JSON lines with the consumer, pod
and partition fields, and checkpoint each partition's last event into Azurite.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from eventhub_balancer_devstack import clusters, deployments
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.install import test_consumer_chart as consumer_chart
from tests.support import consumerprocesses, loading, paths
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.operator import wait_for

PROJECT = paths.EXAMPLES / "orders"
NAMESPACE = consumer_chart.NAMESPACE
#: Orders sent to each of the hub's four partitions.
ORDERS_PER_PARTITION = 150
#: Every wait for the release is bounded by this (seconds): pods start, get their partitions
#: (one operator cycle) and drain 600 small events.
WAIT_S = 60.0
#: The longest a wheel build or install may take (each takes a few seconds).
PIP_TIMEOUT_S = 120
#: The Event Hubs namespace the example's install names with ``--set`` (its values name none,
#: so that an install that forgets it fails): the emulator's connection string reads whatever
#: name the spec gives, and the checkpoint blobs are named after it.
EVENTHUB_NAMESPACE = "shop.servicebus.windows.net"


def example_values() -> dict[str, Any]:
    """The example's values as its install gives them: with the namespace it ``--set``s."""
    values: dict[str, Any] = loading.load_values(PROJECT / "values.yaml") or {}
    values["consumer"]["eventHub"]["fullyQualifiedNamespace"] = EVENTHUB_NAMESPACE
    return values


def pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's wheel, built offline from a copy of the project and installed into a
    directory of its own (returned): what the image's virtualenv adds to the runtime."""
    work = tmp_path_factory.mktemp("example")
    source = work / "orders"
    # A copy: the build writes build/ and *.egg-info beside the sources.
    shutil.copytree(PROJECT, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(work), str(source))
    (wheel,) = work.glob("orders_example-*.whl")
    site = work / "site"
    pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel))
    (installed,) = importlib.metadata.distributions(path=[str(site)])
    # Its one dependency is the runtime, and this environment has a version it accepts (as
    # `pip install` in the image resolves it from the runtime's wheel).
    (requirement,) = [Requirement(r) for r in installed.requires or [] if "extra ==" not in r]
    assert requirement.name == "eventhub-balancer"
    assert importlib.metadata.version(requirement.name) in requirement.specifier
    # The handler is the installed package's, not the source tree's.
    assert (site / "orders" / "pipeline.py").is_file()
    assert not (site / "tests").exists()
    return site


def wait_for_last_checkpoints(
    azurite: Any, store: dict[str, Any], eventhub: dict[str, Any], *, timeout: float
) -> None:
    """Every partition of the example's hub checkpointed at its last order."""
    last = ORDERS_PER_PARTITION - 1
    wait_for(
        lambda: (
            asyncio.run(
                consumerprocesses.checkpoint_positions(
                    azurite.connection_string,
                    store["containerName"],
                    fully_qualified_namespace=eventhub["fullyQualifiedNamespace"],
                    hub=eventhub["name"],
                )
            )
            == dict.fromkeys(["0", "1", "2", "3"], last)
        ),
        timeout=timeout,
        what="every partition checkpointed at its last order",
    )


def order(partition: str, n: int) -> str:
    return json.dumps({"id": f"{partition}-{n}", "amount": 2.0, "status": "paid"})


def handler_records(log_dir: Path) -> list[dict[str, Any]]:
    """The example handler's JSON log lines (one per batch), from every pod's log."""
    found = []
    for log in sorted(log_dir.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("logger") == "orders.pipeline":
                found.append(record)
    return found


def orders_processed(records: list[dict[str, Any]]) -> int:
    """Orders the handler totalled: "partition 3: 50 orders (...)" per batch."""
    return sum(int(r["message"].split(": ")[1].split(" ")[0]) for r in records)


@pytest.fixture
def operator(kubeconfig: Path) -> Iterator[None]:
    running = clusters.start_operator(kubeconfig, namespaces=(NAMESPACE,))
    try:
        yield
    finally:
        running.stop()


def test_the_example_installs_with_one_release_and_consumes(
    image: Path,
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
    kube_client: Any,
    kubeconfig: Path,
    local_kube: LocalKubeAPI,
    operator: None,
    tmp_path: Path,
) -> None:
    values = example_values()
    # A container of this test's own on the shared Azurite.
    values["consumer"]["checkpointStore"]["containerName"] = blob_container.container_name
    rendered = consumer_chart.render(values)
    (deployment,) = rendered["Deployment"]
    (consumer,) = rendered["EventHubConsumer"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    eventhub, store = consumer["spec"]["eventHub"], consumer["spec"]["checkpointStore"]
    emulator_connection_string = consumer_emulator.connection_string()

    def run(*args: str, input: str | None = None) -> str:
        done = kubectl(*args, input=input)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # As the values' comments say: the Secrets, then the release. (`kubectl create` sends
    # protobuf, which the local API does not read: the Secrets go through `apply` instead.)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    run("apply", "-f", "-", input=json.dumps(namespace))
    secrets = [
        (eventhub["credentials"]["connectionStringSecretRef"], emulator_connection_string),
        (store["credentials"]["connectionStringSecretRef"], azurite.connection_string),
    ]
    for ref, value in secrets:
        literal = f"--from-literal={ref['key']}={value}"
        secret = run("-n", NAMESPACE, "create", "secret", "generic", ref["name"], literal,
                     "--dry-run=client", "-o", "yaml")  # fmt: skip
        run("-n", NAMESPACE, "apply", "-f", "-", input=secret)
    manifests = yaml.safe_dump_all([body for bodies in rendered.values() for body in bodies])
    run("-n", NAMESPACE, "apply", "-f", "-", input=manifests)

    asyncio.run(
        send_events(
            emulator_connection_string,
            eventhub["name"],
            dict.fromkeys(["0", "1", "2", "3"], ORDERS_PER_PARTITION),
            body=order,
        )
    )
    logs = tmp_path / "pods"
    local = deployments.LocalImage(
        entrypoint=(sys.executable, "-m", "eventhub_balancer"), env={"PYTHONPATH": str(image)}
    )
    pods = deployments.start(
        kube_client,
        NAMESPACE,
        deployment["metadata"]["name"],
        images={container["image"]: local},
        # What a node gives every container: the API's credentials; the emulators are local.
        node_env={"KUBECONFIG": str(kubeconfig), "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true"},
        log_dir=logs,
    )
    cluster = clusters.LocalCluster(local_kube)
    try:
        names = set(pods.names())
        assert len(names) == deployment["spec"]["replicas"] == 2
        wait_for_last_checkpoints(azurite, store, eventhub, timeout=WAIT_S)
        wait_for(
            lambda: cluster.balanced_over(NAMESPACE, names, 4),
            timeout=WAIT_S,
            what="two partitions a pod",
        )
    finally:
        pods.stop(grace_s=15.0)
        for log in sorted(logs.glob("*.log")):
            print(log.name, log.read_text(errors="replace")[-2000:])
    records = handler_records(logs)
    assert orders_processed(records) == 4 * ORDERS_PER_PARTITION
    assert {r["partition"] for r in records} == {"0", "1", "2", "3"}
    assert {r["consumer"] for r in records} == {consumer["metadata"]["name"]}
    assert {r["pod"] for r in records} == names
