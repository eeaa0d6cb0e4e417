"""The operator on the local stack, in process: a harness for tests and benchmarks.

Everything is real except the pods: the local Kubernetes API (`LocalCluster` reads and writes
it as a cluster: Secrets, EventHubConsumers, Pods, ConfigMaps), the Event Hubs emulator, and
the operator itself (kopf, adapters, handlers) in a background thread (`start_operator`).
Pods are Pod objects whose status the harness sets (the kubelet's part), and `ConsumerDouble`
acknowledges releases as the consumer runtime does after its final checkpoint (the pods' part
of the hand-off). The integration tests use it; ``ehb bench operator`` runs the same actors
as processes of their own (`benchmarks.processes`), watching instead of polling.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from eventhub_balancer import runners
from eventhub_balancer.adapters import eventhubs, kubeapi, tenantidentities
from eventhub_balancer.contracts import (
    configmaps,
    labelselectors,
    podassignments,
    specs,
    timestamps,
)
from eventhub_balancer.handlers import registering, running
from eventhub_balancer_devstack.kube import LocalKubeAPI

logger = logging.getLogger(__name__)

CR = f"{specs.GROUP}/{specs.VERSION}/{specs.PLURAL}"
#: The EventHubConsumer (and hub) and the pods' ``app`` label that `LocalCluster`'s helpers
#: default to.
CONSUMER = "orders"
APP = "consumer"
#: Stands in for the kubelet: holds a deleted pod (deletionTimestamp set) until released.
KUBELET_FINALIZER = "eventhub-balancer.dev/bench-kubelet"
#: The longest wait for any one outcome; a slower operator is a failure, not a figure.
WAIT_SECONDS = 30.0
#: How often outcomes are polled (in-process reads, no HTTP): the resolution of the figures.
POLL_SECONDS = 0.01
#: The longest wait for the consumer double to stop (a round of acknowledgements finishes).
DOUBLE_STOP_SECONDS = 5.0


def stamp(value: datetime.datetime | None = None) -> str:
    return timestamps.format_time(value or datetime.datetime.now(datetime.UTC))


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = WAIT_SECONDS,
    what: str = "condition",
    poll: float = POLL_SECONDS,
) -> Any:
    """The predicate's first truthy value; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(poll)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


class LocalCluster:
    """The local API server seen as a cluster: Secrets, EventHubConsumers, Pods, ConfigMaps."""

    def __init__(self, kube: LocalKubeAPI) -> None:
        self.kube = kube

    # --- objects ---

    def secret(self, namespace: str, *, name: str, key: str, value: str) -> None:
        self.kube.create_object(
            "v1/secrets",
            {"metadata": {"name": name}, "data": {key: base64.b64encode(value.encode()).decode()}},
            namespace=namespace,
        )

    def consumer(
        self,
        namespace: str,
        name: str,
        *,
        hub: str,
        app: str,
        secret: str,
        balancing: dict[str, Any],
    ) -> None:
        spec: dict[str, Any] = {
            "eventHub": {
                "fullyQualifiedNamespace": "shop.servicebus.windows.net",
                "name": hub,
                "credentials": {"connectionStringSecretRef": {"name": secret, "key": "cs"}},
            },
            "checkpointStore": {
                "containerName": "checkpoints",
                "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
            },
            "selector": {"matchLabels": {"app": app}},
            "balancing": balancing,
        }
        self.kube.create_object(
            CR,
            {
                "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
                "kind": specs.KIND,
                "metadata": {"name": name},
                "spec": spec,
            },
            namespace=namespace,
        )

    def pod(
        self,
        namespace: str,
        name: str,
        *,
        app: str = APP,
        ready: bool = True,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.kube.create_object(
            "v1/pods",
            {
                "metadata": {"name": name, "labels": {"app": app, **(labels or {})}},
                "spec": {"containers": [{"name": "c", "image": "consumer"}]},
            },
            namespace=namespace,
        )
        self.set_ready(namespace, name, ready)

    def set_ready(self, namespace: str, name: str, ready: bool) -> None:
        self.kube.patch_object(
            "v1/pods",
            name,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True" if ready else "False",
                            "lastTransitionTime": stamp(),
                        }
                    ],
                }
            },
            namespace=namespace,
            subresource="status",
        )

    def terminate(self, namespace: str, name: str) -> None:
        """A graceful delete while the kubelet stops the containers: a finalizer holds the
        pod with its deletionTimestamp set (the API server does not let a patch set it)."""
        self.kube.patch_object(
            "v1/pods", name, {"metadata": {"finalizers": [KUBELET_FINALIZER]}}, namespace=namespace
        )
        self.kube.delete_object("v1/pods", name, namespace=namespace)

    def delete_pod(self, namespace: str, name: str) -> None:
        """The pod is gone (after a terminate: the kubelet is done)."""
        body = self.kube.get_object("v1/pods", name, namespace=namespace)
        if body is None:
            return
        if body["metadata"].get("finalizers"):
            self.kube.patch_object(
                "v1/pods", name, {"metadata": {"finalizers": None}}, namespace=namespace
            )
        if self.kube.get_object("v1/pods", name, namespace=namespace) is not None:
            self.kube.delete_object("v1/pods", name, namespace=namespace)

    # --- reading ---

    def maps(self, namespace: str) -> dict[str, dict[str, Any]]:
        """pod -> its assignment ConfigMap body."""
        result = {}
        for cm in self.kube.list_objects(
            "v1/configmaps", namespace=namespace, label_selector=configmaps.LABEL_POD
        ):
            result[(cm.get("data") or {}).get("pod", cm["metadata"]["name"])] = cm
        return result

    def assignment(self, namespace: str) -> dict[str, dict[str, podassignments.PartitionEntry]]:
        return {
            pod: {
                str(pid): entry
                for pid, entry in podassignments.parse_data(cm.get("data") or {}).partitions.items()
            }
            for pod, cm in self.maps(namespace).items()
        }

    def counts(self, namespace: str) -> dict[str, int]:
        """Owned (not revoking) partitions per pod, as the ConfigMaps say."""
        return {
            pod: sum(1 for e in parts.values() if e.state == "owned")
            for pod, parts in self.assignment(namespace).items()
        }

    def revoking(self, namespace: str) -> int:
        return sum(
            1
            for parts in self.assignment(namespace).values()
            for e in parts.values()
            if e.state == "revoking"
        )

    def epochs(self, namespace: str) -> dict[str, int]:
        return {
            pid: e.epoch
            for parts in self.assignment(namespace).values()
            for pid, e in parts.items()
        }

    def status(self, namespace: str, name: str = CONSUMER) -> dict[str, Any]:
        body = self.kube.get_object(CR, name, namespace=namespace) or {}
        return dict(body.get("status") or {})

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any]:
        for c in self.status(namespace, name).get("conditions", []):
            if c["type"] == type_:
                return dict(c)
        return {}

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return self.kube.list_objects("v1/events", namespace=namespace)

    def balanced_over(self, namespace: str, pods: set[str], partitions: int) -> bool:
        """Every partition owned by one of ``pods``, floor/ceil shares, no hand-off left."""
        counts = self.counts(namespace)
        owned = {p: counts.get(p, 0) for p in pods}
        if sum(owned.values()) != partitions or sum(counts.values()) != partitions:
            return False
        if self.revoking(namespace):
            return False
        low, high = partitions // len(pods), -(-partitions // len(pods))
        return all(low <= n <= high for n in owned.values())


class ConsumerDouble:
    """Acknowledges revocations like the consumer runtime: ``released`` = {partition: epoch}.

    It also writes ``applied-generation``. ``pods`` limits which pods answer (None: all; the
    others hang, as a stuck consumer does, so that hand-off timeouts can be exercised).
    """

    def __init__(
        self,
        kube: LocalKubeAPI,
        namespace: str,
        *,
        pods: set[str] | None = None,
        poll_seconds: float = 0.05,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.pods = pods
        self.poll_seconds = poll_seconds
        self.acknowledged: list[tuple[str, str, int]] = []
        self._loop = runners.BackgroundLoop(name="consumer-double", timeout=DOUBLE_STOP_SECONDS)

    def __enter__(self) -> ConsumerDouble:
        self._loop.start()
        self._loop.submit(self._acknowledging())
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self._loop.stop()
        except TimeoutError:
            logger.warning("the consumer double did not stop in %g s", DOUBLE_STOP_SECONDS)

    async def _acknowledging(self) -> None:
        # The calls to the local API block: this loop's thread is theirs alone.
        while True:
            await asyncio.sleep(self.poll_seconds)
            # A ConfigMap deleted or changed between list and patch: the next round retries.
            with contextlib.suppress(Exception):
                self.acknowledge_once()

    def acknowledge_once(self) -> int:
        done = 0
        for cm in self.kube.list_objects(
            "v1/configmaps", namespace=self.namespace, label_selector=configmaps.LABEL_POD
        ):
            parsed = podassignments.parse_data(cm.get("data") or {})
            if self.pods is not None and parsed.pod not in self.pods:
                continue
            annotations = cm["metadata"].get("annotations") or {}
            released = configmaps.parse_released(annotations)
            wanted = {pid: e.epoch for pid, e in parsed.partitions.items() if e.state == "revoking"}
            merged = {str(p): e for p, e in {**released, **wanted}.items()}
            applied = configmaps.parse_applied_generation(annotations)
            if merged == released and applied == parsed.generation:
                continue
            self.kube.patch_object(
                "v1/configmaps",
                cm["metadata"]["name"],
                {
                    "metadata": {
                        "annotations": {
                            configmaps.ANNOTATION_RELEASED: configmaps.build_released(merged),
                            configmaps.ANNOTATION_APPLIED_GENERATION: (
                                configmaps.build_applied_generation(parsed.generation)
                            ),
                        }
                    }
                },
                namespace=self.namespace,
            )
            self.acknowledged += [
                (parsed.pod, p, e) for p, e in wanted.items() if released.get(p) != e
            ]
            done += 1
        return done


def start_operator(
    kubeconfig: Path,
    *,
    namespaces: tuple[str, ...] = (),
    clusterwide: bool = False,
    standalone: bool = True,
    peering: str | None = None,
    priority: int = 0,
    refresh_seconds: float = 60.0,
    hub_timeout: float = 3.0,
    annotate_pods: bool = False,
    pod_scope: labelselectors.Selector | None = None,
) -> running.OperatorThread:
    """The real operator (kopf, adapters, handlers) in a thread, on the given API server."""
    api = kubeapi.KubeAPI.from_environment(str(kubeconfig))
    runtime = registering.Operator(
        kube=api,
        hubs=eventhubs.EventHubs(
            refresh_seconds=refresh_seconds,
            timeout=hub_timeout,
            tenant_identities=tenantidentities.TenantIdentities(api),
        ),
        connection=api.connection_info,
        annotate_pods=annotate_pods,
        pod_scope=pod_scope,
    )
    options = running.Options(
        namespaces=namespaces,
        clusterwide=clusterwide,
        standalone=standalone,
        peering_name=peering,
        priority=priority,
        metrics_host="127.0.0.1",
        metrics_port=0,
    )
    try:
        return running.OperatorThread(runtime, options).start()
    except BaseException:
        api.close()
        raise
