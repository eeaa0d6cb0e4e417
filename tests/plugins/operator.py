"""The operator on the local stack: an API server, an Event Hubs emulator, pods without kubelet.

There is no kubelet, so tests play it: they create pods and set their status through the
``/status`` subresource. `ConsumerDouble` (from `eventhub_balancer.benchmarks.operating`,
shared with ``ehb bench operator``) plays the consumer pods' part of the contract: it
acknowledges every revoked partition by writing the ``released`` annotation on the pod's
ConfigMap (and ``applied-generation``), as the real runtime does after its final checkpoint.
"""

from __future__ import annotations

import base64
import datetime
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.benchmarks import operating
from eventhub_balancer.benchmarks.operating import (
    ConsumerDouble as ConsumerDouble,
)  # re-exported for tests
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers import running
from eventhub_balancer.local.eventhubs import EventHubsEmulator
from eventhub_balancer.local.kube import LocalKubeAPI

CR = f"{specs.GROUP}/{specs.VERSION}/{specs.PLURAL}"
HUB = "orders"
KUBELET_FINALIZER = operating.KUBELET_FINALIZER
#: Every wait in these tests is bounded by this (seconds) unless a test says otherwise.
WAIT = 15.0


def wait_for(
    predicate: Callable[[], Any], *, timeout: float = WAIT, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def stamp(value: datetime.datetime | None = None) -> str:
    return specs.format_time(value or datetime.datetime.now(datetime.UTC))


class Stack:
    """The local API and Event Hubs, with kubelet-like helpers and operator start/stop."""

    def __init__(self, kube: LocalKubeAPI, emulator: EventHubsEmulator, kubeconfig: Path) -> None:
        self.kube = kube
        self.emulator = emulator
        self.kubeconfig = kubeconfig
        self.operators: list[running.OperatorThread] = []

    # --- objects ---

    def secret(
        self, namespace: str, name: str = "eh", key: str = "cs", value: str | None = None
    ) -> None:
        raw = value if value is not None else self.emulator.connection_string()
        self.kube.create_object(
            "v1/secrets",
            {"metadata": {"name": name}, "data": {key: base64.b64encode(raw.encode()).decode()}},
            namespace=namespace,
        )

    def consumer(
        self,
        namespace: str,
        name: str = "orders",
        *,
        hub: str = HUB,
        app: str = "consumer",
        secret: str = "eh",
        **balancing: int,
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
            "balancing": {
                "intervalSeconds": 2,
                "podGraceSeconds": 3,
                "handoffTimeoutSeconds": 10,
                **balancing,
            },
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

    def pod(self, namespace: str, name: str, *, app: str = "consumer", ready: bool = True) -> None:
        self.kube.create_object(
            "v1/pods",
            {
                "metadata": {"name": name, "labels": {"app": app}},
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

    def status(self, namespace: str, name: str = "orders") -> dict[str, Any]:
        body = self.kube.get_object(CR, name, namespace=namespace) or {}
        return dict(body.get("status") or {})

    def condition(self, namespace: str, type_: str, name: str = "orders") -> dict[str, Any]:
        for c in self.status(namespace, name).get("conditions", []):
            if c["type"] == type_:
                return dict(c)
        return {}

    def maps(self, namespace: str) -> dict[str, dict[str, Any]]:
        """pod -> its ConfigMap body."""
        result = {}
        for cm in self.kube.list_objects(
            "v1/configmaps", namespace=namespace, label_selector=configmaps.LABEL_POD
        ):
            result[cm["data"].get("pod", cm["metadata"]["name"])] = cm
        return result

    def assignment(self, namespace: str) -> dict[str, dict[str, configmaps.PartitionEntry]]:
        return {
            pod: dict(configmaps.parse_data(cm.get("data") or {}).partitions)
            for pod, cm in self.maps(namespace).items()
        }

    def counts(self, namespace: str) -> dict[str, int]:
        return {
            pod: sum(1 for e in parts.values() if e.state == "owned")
            for pod, parts in self.assignment(namespace).items()
        }

    def epochs(self, namespace: str) -> dict[str, int]:
        return {
            pid: e.epoch
            for parts in self.assignment(namespace).values()
            for pid, e in parts.items()
        }

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return self.kube.list_objects("v1/events", namespace=namespace)

    def reasons(self, namespace: str) -> set[str]:
        return {e.get("reason", "") for e in self.events(namespace)}

    def balanced(self, namespace: str, name: str = "orders") -> bool:
        return self.condition(namespace, "Balanced", name).get("status") == "True"

    # --- the operator ---

    def start_operator(
        self,
        *,
        namespaces: tuple[str, ...] = (),
        clusterwide: bool = False,
        standalone: bool = True,
        peering: str | None = None,
        priority: int = 0,
        refresh_seconds: float = 60.0,
    ) -> running.OperatorThread:
        operator = operating.start_operator(
            self.kubeconfig,
            namespaces=namespaces,
            clusterwide=clusterwide,
            standalone=standalone,
            peering=peering,
            priority=priority,
            refresh_seconds=refresh_seconds,
        )
        self.operators.append(operator)
        return operator

    def stop_operator(self, operator: running.OperatorThread) -> None:
        operator.stop()
        self.operators.remove(operator)


@pytest.fixture
def operator_stack(tmp_path: Path) -> Iterator[Stack]:
    """A fresh local API and an emulator with hub ``orders`` of 32 partitions."""
    kube = LocalKubeAPI().start()
    emulator = EventHubsEmulator(hubs={HUB: 32, "small": 4})
    emulator.start_in_thread()
    stack = Stack(kube, emulator, kube.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield stack
    finally:
        for operator in list(stack.operators):
            operator.stop()
        emulator.stop_in_thread()
        kube.stop()


@pytest.fixture
def namespace() -> str:
    return f"ns-{uuid.uuid4().hex[:8]}"
