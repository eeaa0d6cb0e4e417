"""The demo's scenario on a real cluster: the built images, the installed CRDs and operator.

What the local stack cannot show: that the images start, that the chart's RBAC is enough on a
real API server, and that kubelet readiness and real pod deletion drive the hand-offs as the
local kubelet does. The Event Hubs emulator and Azurite run on this machine, listening on every
address at fixed ports. The operator and the pods accept the emulators only on loopback, so a
sidecar (``forwarding.py``, beside this file) forwards those ports from the pod's loopback to
``$EHB_E2E_HOST_ADDRESS`` (on kind, the gateway of the ``kind`` Docker network). The operator
must already be installed (the chart, with development endpoints allowed and the same sidecar)
and the consumer base image loaded into the cluster; .github/workflows/e2e.yaml does all that.

Skipped unless ``-m cluster`` selects it (tests/conftest.py) and ``$KUBECONFIG`` names a cluster.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CRD_GROUP = "eventhub-balancer.dev"
CRD_VERSION = "v1alpha1"
CRD_PLURAL = "eventhubconsumers"
HUB = "orders"
PARTITIONS = 8
CONSUMER = "orders"
APP_LABEL = {"app.kubernetes.io/name": "orders-consumer"}
#: Fixed, so that the checkpoint blobs' names do not depend on the emulator's port.
FQNS = "e2e.servicebus.windows.net"
#: Fixed ports (the emulators' usual ones): the operator's sidecar is set up before the test runs.
EVENTHUBS_PORT = 5672
BLOB_PORT = 10000
FORWARDER = Path(__file__).resolve().parent / "forwarding.py"
#: Events sent to every partition before each step: enough to show loss, few enough to drain.
EVENTS_PER_STEP = 20
#: The longest wait for pods to start and the plan to settle; image pulls and a cold JVM are slow.
STEP_TIMEOUT_S = 240.0
#: The consumer base image as docker/consumer.Dockerfile's header builds it.
DEFAULT_CONSUMER_IMAGE = "eventhub-balancer-consumer:0.1.0"
POLL_S = 2.0
#: A plain handler (no Spark: faster to start); the checkpoints are what the test checks.
HANDLER_SOURCE = "def process(events, context):\n    return None\n"


def required_env(name: str, what: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"set ${name}: {what}")
    return value


def wait_until(what: str, check: Callable[[], Any], timeout: float = STEP_TIMEOUT_S) -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(POLL_S)
    pytest.fail(f"{what}: not reached in {timeout:.0f} s (last: {last!r})")


@pytest.fixture(scope="module")
def api_client() -> Iterator[Any]:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("needs a real cluster: set $KUBECONFIG")
    from kubernetes import client, config

    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    api = client.ApiClient()
    try:
        client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{CRD_PLURAL}.{CRD_GROUP}")
    except client.ApiException as e:
        pytest.fail(f"the CRD is not installed ({e.status}): kubectl apply -f crds/ first")
    yield api
    api.close()


@pytest.fixture(scope="module")
def host_address() -> str:
    return required_env(
        "EHB_E2E_HOST_ADDRESS",
        "the address at which the cluster's pods reach this machine (kind: the gateway of the "
        "'kind' Docker network, e.g. 172.18.0.1)",
    )


@pytest.fixture(scope="module")
def services(api_client: Any) -> Iterator[tuple[Any, str, str]]:
    """The emulator and Azurite on all addresses; loopback connection strings, which hold on
    this machine and, through the forwarding sidecar, in the pods."""
    from eventhub_balancer_devstack import azurite
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

    emulator = EventHubsEmulator(host="0.0.0.0", port=EVENTHUBS_PORT, hubs={HUB: PARTITIONS})
    with emulator.running_in_thread() as emu, azurite.Azurite(host="0.0.0.0", port=BLOB_PORT):
        eventhub = emu.connection_string(HUB).replace("sb://0.0.0.0:", "sb://127.0.0.1:")
        storage = azurite.connection_string(host="127.0.0.1", port=BLOB_PORT)
        yield emu, eventhub, storage


@pytest.fixture
def namespace(api_client: Any) -> Iterator[str]:
    from kubernetes import client

    name = f"ehb-e2e-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    # $EHB_E2E_KEEP_NAMESPACE: leave it for a look after a failure (CI throws the cluster away).
    if not os.environ.get("EHB_E2E_KEEP_NAMESPACE"):
        core.delete_namespace(name)


def forwarder_container(*, image: str, host_address: str) -> dict[str, Any]:
    """The sidecar that makes the emulators on this machine reachable on the pod's loopback."""
    return {
        "name": "loopback",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "/forwarder/forwarding.py"],
        "args": [f"{p}={host_address}:{p}" for p in (EVENTHUBS_PORT, BLOB_PORT)],
        "volumeMounts": [{"name": "forwarder", "mountPath": "/forwarder"}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def consumer_objects(
    *, namespace: str, image: str, host_address: str, eventhub: str, storage: str
) -> dict[str, Any]:
    """The example manifests (manifests/examples/), cut to what the scenario needs."""
    secret_ref = {"name": "orders-eh", "key": "connectionString"}
    blob_ref = {"name": "orders-blob", "key": "connectionString"}
    env = [
        {"name": "EHB_CONSUMER", "value": CONSUMER},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "EHB_EVENTHUB_CONNECTION_STRING", "valueFrom": {"secretKeyRef": secret_ref}},
        {"name": "EHB_BLOB_CONNECTION_STRING", "valueFrom": {"secretKeyRef": blob_ref}},
    ]
    return {
        "secrets": [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "orders-eh"},
                "stringData": {"connectionString": eventhub},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "orders-blob"},
                "stringData": {"connectionString": storage},
            },
        ],
        "handler": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "e2e-handler"},
            "data": {"e2e_handler.py": HANDLER_SOURCE},
        },
        "forwarder": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "e2e-forwarder"},
            "data": {"forwarding.py": FORWARDER.read_text()},
        },
        "service_account": {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "orders-consumer"},
        },
        "role": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "orders-consumer"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["list", "watch", "patch"],
                }
            ],
        },
        "role_binding": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "orders-consumer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "orders-consumer",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "orders-consumer", "namespace": namespace}
            ],
        },
        "consumer": {
            "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
            "kind": "EventHubConsumer",
            "metadata": {"name": CONSUMER},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": FQNS,
                    "name": HUB,
                    "consumerGroup": "$Default",
                    "credentials": {"connectionStringSecretRef": secret_ref},
                },
                "checkpointStore": {
                    "containerName": "checkpoints",
                    "credentials": {"connectionStringSecretRef": blob_ref},
                },
                "selector": {"matchLabels": APP_LABEL},
                "startPosition": "earliest",
                "balancing": {"intervalSeconds": 5, "podGraceSeconds": 20},
            },
        },
        "deployment": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "orders-consumer", "labels": APP_LABEL},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": APP_LABEL},
                "template": {
                    "metadata": {"labels": APP_LABEL},
                    "spec": {
                        "serviceAccountName": "orders-consumer",
                        "terminationGracePeriodSeconds": 60,
                        "containers": [
                            {
                                "name": "consumer",
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "args": [
                                    "consume",
                                    "--handler=e2e_handler:process",
                                    "--handler-path=/handler",
                                    "--allow-development-endpoints",
                                ],
                                "env": env,
                                "ports": [{"name": "http", "containerPort": 8080}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/readyz", "port": "http"},
                                    "periodSeconds": 2,
                                },
                                "volumeMounts": [
                                    {"name": "handler", "mountPath": "/handler"},
                                    {"name": "tmp", "mountPath": "/tmp"},
                                ],
                            },
                            forwarder_container(image=image, host_address=host_address),
                        ],
                        "volumes": [
                            {"name": "handler", "configMap": {"name": "e2e-handler"}},
                            {"name": "forwarder", "configMap": {"name": "e2e-forwarder"}},
                            {"name": "tmp", "emptyDir": {}},
                        ],
                    },
                },
            },
        },
    }


def assignments(api_client: Any, namespace: str) -> dict[str, list[str]] | None:
    """Ready pod -> its partitions, from the assignment ConfigMaps; None while any pod is not
    Ready or not up to date (a balanced plan counts only once the pods applied it)."""
    from kubernetes import client

    from eventhub_balancer.contracts import configmaps, podassignments

    core = client.CoreV1Api(api_client)
    selector = ",".join(f"{k}={v}" for k, v in APP_LABEL.items())
    pods = [
        p
        for p in core.list_namespaced_pod(namespace, label_selector=selector).items
        if p.metadata.deletion_timestamp is None
    ]
    ready = {
        p.metadata.name
        for p in pods
        if any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
    }
    if not pods or ready != {p.metadata.name for p in pods}:
        return None
    found: dict[str, list[str]] = {}
    maps = core.list_namespaced_config_map(
        namespace, label_selector=configmaps.consumer_selector(CONSUMER)
    ).items
    for item in maps:
        parsed = podassignments.parse_data(item.data or {})
        applied = configmaps.parse_applied_generation(item.metadata.annotations)
        pod = (item.data or {}).get(configmaps.KEY_POD, "")
        if pod in ready:
            if applied != parsed.generation:
                return None
            if any(e.state != "owned" for e in parsed.partitions.values()):
                return None  # a hand-off is still under way
            found[pod] = sorted(parsed.partitions)
    return found if set(found) == ready else None


def balanced(api_client: Any, namespace: str, replicas: int) -> dict[str, list[str]] | None:
    """The assignment when every partition has exactly one owner and counts differ by <= 1."""
    found = assignments(api_client, namespace)
    if found is None or len(found) != replicas:
        return None
    owned = [p for parts in found.values() for p in parts]
    counts = [len(parts) for parts in found.values()]
    if sorted(owned) != sorted(str(i) for i in range(PARTITIONS)):
        return None
    return found if max(counts) - min(counts) <= 1 else None


def produce(connection_string: str) -> None:
    from azure.eventhub import EventData, EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(connection_string)
    with producer:
        for partition in range(PARTITIONS):
            batch = producer.create_batch(partition_id=str(partition))
            for i in range(EVENTS_PER_STEP):
                batch.add(EventData(json.dumps({"partition": partition, "i": i})))
            producer.send_batch(batch)


def checkpoints(storage: str) -> dict[str, int]:
    """Partition -> the sequence number of its last processed event, from the blobs."""
    from azure.storage.blob import ContainerClient

    from eventhub_balancer.contracts import checkpointblobs

    prefix = checkpointblobs.blob_prefix(
        fully_qualified_namespace=FQNS, eventhub_name=HUB, consumer_group="$Default"
    )
    container = ContainerClient.from_connection_string(storage, "checkpoints")
    with container:
        if not container.exists():
            return {}
        return {
            checkpointblobs.partition_of(blob.name): checkpointblobs.decode_metadata(
                blob.metadata or {}
            ).position.sequence_number
            for blob in container.list_blobs(name_starts_with=prefix, include=["metadata"])
        }


def test_scale_out_and_in_stays_balanced_and_loses_nothing(
    api_client: Any, host_address: str, services: tuple[Any, str, str], namespace: str
) -> None:
    from kubernetes import client

    emulator, eventhub, storage = services
    image = os.environ.get("EHB_E2E_CONSUMER_IMAGE", DEFAULT_CONSUMER_IMAGE)
    objects = consumer_objects(
        namespace=namespace,
        image=image,
        host_address=host_address,
        eventhub=eventhub,
        storage=storage,
    )
    core = client.CoreV1Api(api_client)
    for secret in objects["secrets"]:
        core.create_namespaced_secret(namespace, secret)
    core.create_namespaced_config_map(namespace, objects["handler"])
    core.create_namespaced_config_map(namespace, objects["forwarder"])
    core.create_namespaced_service_account(namespace, objects["service_account"])
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(namespace, objects["role"])
    rbac.create_namespaced_role_binding(namespace, objects["role_binding"])
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        CRD_GROUP, CRD_VERSION, namespace, CRD_PLURAL, objects["consumer"]
    )
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, objects["deployment"])

    for replicas in (2, 4, 3):
        apps.patch_namespaced_deployment_scale(
            "orders-consumer", namespace, {"spec": {"replicas": replicas}}
        )
        produce(eventhub)
        wait_until(
            f"{replicas} pods own {PARTITIONS} partitions, one owner each, evenly",
            lambda n=replicas: balanced(api_client, namespace, n),
        )

    # A deleted pod hands its partitions over; the Deployment's new pod takes its share.
    before = wait_until("balanced before the deletion", lambda: balanced(api_client, namespace, 3))
    deleted = sorted(before)[0]
    core.delete_namespaced_pod(deleted, namespace)
    produce(eventhub)
    after = wait_until(
        f"balanced again after deleting {deleted}",
        lambda: (found := balanced(api_client, namespace, 3)) and deleted not in found and found,
    )
    assert deleted not in after

    # Nothing lost: every partition's checkpoint reaches its last event.
    steps = 4
    last = {
        str(p): emulator.partition_info(HUB, str(p)).last_enqueued_sequence_number
        for p in range(PARTITIONS)
    }
    assert all(n == steps * EVENTS_PER_STEP - 1 for n in last.values()), last
    wait_until(
        "every checkpoint at its partition's last event", lambda: checkpoints(storage) == last
    )
