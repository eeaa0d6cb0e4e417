"""The operator on the local stack: an API server, an Event Hubs emulator, pods without kubelet.

There is no kubelet, so tests play it: they create pods and set their status through the
``/status`` subresource. `ConsumerDouble` (from `eventhub_balancer_devstack.benchmarks.operating`,
shared with ``ehb bench operator``) plays the consumer pods' part of the contract: it
acknowledges every revoked partition by writing the ``released`` annotation on the pod's
ConfigMap (and ``applied-generation``), as the real runtime does after its final checkpoint.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.handlers import running
from eventhub_balancer_devstack.benchmarks import operating
from eventhub_balancer_devstack.benchmarks.operating import (
    ConsumerDouble as ConsumerDouble,
)  # re-exported for tests
from eventhub_balancer_devstack.benchmarks.operating import stamp as stamp
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from eventhub_balancer_devstack.kube import LocalKubeAPI

CR = operating.CR
HUB = "orders"
KUBELET_FINALIZER = operating.KUBELET_FINALIZER
#: Every wait in these tests is bounded by this (seconds) unless a test says otherwise.
WAIT = 15.0


def wait_for(
    predicate: Callable[[], Any], *, timeout: float = WAIT, what: str = "condition"
) -> Any:
    """`operating.wait_for`, failing the test (AssertionError) when it times out."""
    try:
        return operating.wait_for(predicate, timeout=timeout, what=what, poll=0.05)
    except TimeoutError as error:
        raise AssertionError(str(error)) from error


class Stack(operating.Cluster):
    """The local API and Event Hubs, with kubelet-like helpers and operator start/stop.

    The helpers are `operating.Cluster`'s, with the tests' defaults: the emulator's
    connection string in Secret ``eh``, EventHubConsumer ``orders`` on hub ``orders``
    selecting ``app=consumer``, short balancing timings.
    """

    def __init__(self, kube: LocalKubeAPI, emulator: EventHubsEmulator, kubeconfig: Path) -> None:
        super().__init__(kube)
        self.emulator = emulator
        self.kubeconfig = kubeconfig
        self.operators: list[running.OperatorThread] = []

    # --- objects ---

    def secret(
        self, namespace: str, name: str = "eh", key: str = "cs", value: str | None = None
    ) -> None:
        raw = value if value is not None else self.emulator.connection_string()
        super().secret(namespace, name=name, key=key, value=raw)

    def consumer(  # type: ignore[override]  # balancing settings as keywords
        self,
        namespace: str,
        name: str = "orders",
        *,
        hub: str = HUB,
        app: str = "consumer",
        secret: str = "eh",
        **balancing: int,
    ) -> None:
        super().consumer(
            namespace,
            name,
            hub=hub,
            app=app,
            secret=secret,
            balancing={
                "intervalSeconds": 2,
                "podGraceSeconds": 3,
                "handoffTimeoutSeconds": 10,
                **balancing,
            },
        )

    # --- reading ---

    def condition(  # type: ignore[override]  # the tests' argument order
        self, namespace: str, type_: str, name: str = "orders"
    ) -> dict[str, Any]:
        return super().condition(namespace, name, type_)

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
