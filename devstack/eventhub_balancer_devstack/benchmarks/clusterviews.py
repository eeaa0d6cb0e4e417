"""The operator benchmarks' side of the local API server (`operating`, `churning`): a
`Cluster` to act on it as a kubelet and a user would, a `View` of the assignment as the
harness's watch of the ConfigMaps delivers it, and the EventHubConsumer they create
(`consumer_body`). Their consumer pods carry the label the consumer chart's pods carry
(`labelselectors.CONSUMER_POD_LABEL`), so that ``--pod-selector`` can select them apart from
other workloads' pods."""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from typing import Any

import kubernetes.client

from eventhub_balancer.contracts import labelselectors, podassignments, specs
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.benchmarks import otherworkloads

#: The checkpoint container on Azurite.
CONTAINER = "checkpoints"
#: The label selector that selects exactly the benchmarks' consumer pods: the consumer
#: chart's label (`labelselectors.CONSUMER_POD_LABEL`), which they carry.
CONSUMER_PODS = labelselectors.CONSUMER_PODS


def consumer_pod_labels(app: str) -> dict[str, str]:
    """A bench's consumer pod's labels: its consumer's ``app`` and the consumer chart's."""
    key, value = labelselectors.CONSUMER_POD_LABEL
    return {"app": app, key: value}


class View:
    """The assignment as the harness's watch of the ConfigMaps delivered it: per consumer,
    per pod, the partitions owned and revoking (kept as counts, so a check is cheap)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[str, dict[str, tuple[int, int]]] = {}

    def on_body(self, event_type: str, body: Any) -> None:
        parsed = podassignments.parse_data(body.get("data") or {})
        states = [e.state for e in parsed.partitions.values()]
        with self._lock:
            pods = self._maps.setdefault(parsed.consumer, {})
            if event_type == "DELETED":
                pods.pop(parsed.pod, None)
            else:
                pods[parsed.pod] = (states.count("owned"), states.count("revoking"))

    def pods(self, consumer: str) -> dict[str, tuple[int, int]]:
        with self._lock:
            return dict(self._maps.get(consumer, {}))

    def owned(self, consumer: str, pods: set[str]) -> int:
        return sum(owned for pod, (owned, _) in self.pods(consumer).items() if pod in pods)

    def balanced_over(self, consumer: str, pods: set[str], partitions: int) -> bool:
        """Every partition owned by one of ``pods``, floor/ceil shares, no hand-off left."""
        seen = self.pods(consumer)
        if sum(o for o, _ in seen.values()) != partitions or any(r for _, r in seen.values()):
            return False
        owned = [seen.get(p, (0, 0))[0] for p in pods]
        low, high = partitions // len(pods), -(-partitions // len(pods))
        return sum(owned) == partitions and all(low <= n <= high for n in owned)


def consumer_body(
    name: str,
    *,
    hub: str,
    app: str,
    interval: int,
    secret: str = "eh",
    host: str = "shop.servicebus.windows.net",
) -> dict[str, Any]:
    """A bench's EventHubConsumer: ``hub`` on ``host`` through the Secret ``secret``, its
    checkpoints in `CONTAINER` through the Secret ``blob``, the pods labelled ``app=app``."""
    return {
        "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
        "kind": specs.KIND,
        "metadata": {"name": name},
        "spec": {
            "eventHub": {
                "fullyQualifiedNamespace": host,
                "name": hub,
                "credentials": {"connectionStringSecretRef": {"name": secret, "key": "cs"}},
            },
            "checkpointStore": {
                "containerName": CONTAINER,
                "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
            },
            "selector": {"matchLabels": {"app": app}},
            "balancing": {
                "intervalSeconds": interval,
                "podGraceSeconds": 20,
                "handoffTimeoutSeconds": 30,
            },
        },
    }


#: How long a new namespace may take to get its default ServiceAccount on a real server.
NAMESPACE_READY_S = 30.0


class Cluster:
    """The API server process seen over HTTP: what the kubelet and a user would do."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.namespace = namespace

    def ensure_namespace(self) -> None:
        """Create the namespace unless it exists (the local API makes them on first use; a
        real one does not), and wait for its default ServiceAccount, which pods need."""
        try:
            body: Any = {"metadata": {"name": self.namespace}}
            self.core.create_namespace(body, _preload_content=False)
        except kubernetes.client.ApiException as e:
            if e.status != 409:
                raise
        deadline = time.monotonic() + NAMESPACE_READY_S
        while time.monotonic() < deadline:
            try:
                self.core.read_namespaced_service_account(
                    "default", self.namespace, _preload_content=False
                )
                return
            except kubernetes.client.ApiException as e:
                if e.status != 404:
                    raise
            time.sleep(0.05)
        raise TimeoutError(f"namespace {self.namespace} got no default ServiceAccount")

    def secret(self, name: str, key: str, value: str) -> None:
        body: Any = {
            "metadata": {"name": name},
            "data": {key: base64.b64encode(value.encode()).decode()},
        }
        self.core.create_namespaced_secret(self.namespace, body, _preload_content=False)

    def credentials(self, *, hubs: str, store: str) -> None:
        """The Secrets `consumer_body` names: ``eh`` (the Event Hubs connection string) and
        ``blob`` (the checkpoint store's)."""
        self.secret("eh", "cs", hubs)
        self.secret("blob", "cs", store)

    def consumer(self, name: str, *, app: str, secret: str, interval: int) -> None:
        body = consumer_body(name, hub=name, app=app, secret=secret, interval=interval)
        self.custom.create_namespaced_custom_object(
            specs.GROUP, specs.VERSION, self.namespace, specs.PLURAL, body, _preload_content=False
        )

    def pod(self, name: str, *, app: str, ready: bool = True) -> None:
        """A pod of the consumer's Deployment: Running and Ready, or (``ready=False``) still
        starting, until `make_ready`."""
        body: Any = {
            "metadata": {"name": name, "labels": consumer_pod_labels(app)},
            "spec": {"containers": [{"name": "c", "image": "consumer"}]},
        }
        self.core.create_namespaced_pod(self.namespace, body, _preload_content=False)
        if ready:
            self.make_ready(name)

    def other_pod(self, i: int) -> None:
        """The ``i``-th pod of another workload (`otherworkloads`): created, never started."""
        body: Any = otherworkloads.body(i)
        self.core.create_namespaced_pod(self.namespace, body, _preload_content=False)

    def pod_bytes(self, name: str) -> int:
        """The bytes of one pod's JSON as the API server returns it."""
        response: Any = self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
        return len(response.data)

    def pods_list_bytes(self) -> int:
        """The bytes of the namespace's pods LIST as the API server returns it (what a pod
        watch without a selector reads when it starts), counted as they stream in."""
        response: Any = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        try:
            return sum(len(chunk) for chunk in response.stream(2**16))
        finally:
            response.release_conn()

    def make_ready(self, name: str) -> None:
        status = {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": clusters.stamp()}
                ],
            }
        }
        self.core.patch_namespaced_pod_status(name, self.namespace, status, _preload_content=False)

    def terminate(self, name: str) -> None:
        """A graceful delete while the kubelet stops the containers: a finalizer holds the
        pod with its deletionTimestamp set."""
        finalizers = {"metadata": {"finalizers": [clusters.KUBELET_FINALIZER]}}
        self.core.patch_namespaced_pod(name, self.namespace, finalizers, _preload_content=False)
        self.core.delete_namespaced_pod(name, self.namespace, _preload_content=False)

    def delete_pod(self, name: str) -> None:
        """The pod is gone (after a terminate: the kubelet is done)."""
        with contextlib.suppress(kubernetes.client.ApiException):
            self.core.patch_namespaced_pod(
                name, self.namespace, {"metadata": {"finalizers": None}}, _preload_content=False
            )
        with contextlib.suppress(kubernetes.client.ApiException):
            self.core.delete_namespaced_pod(name, self.namespace, _preload_content=False)
