"""The whole local stack in one object: Event Hubs emulator, Azurite and the Kubernetes API.

The Kubernetes API is the local one (in this process) or the real control plane
(``StackOptions.kube = "real"``), whichever the caller asks for.

`ehb local up`, the demo and the benchmarks all need the three together, started in the right
order and stopped whatever happens; this is that one place. Ports are fixed by default (5672,
10000, 16443) so that the Event Hubs namespace name, and with it the checkpoint blob names,
stay the same across restarts of the stack.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from eventhub_balancer.contracts import conditions
from eventhub_balancer_devstack import azurite as azurite_module
from eventhub_balancer_devstack import deployments, kubeservers
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

if TYPE_CHECKING:
    from eventhub_balancer_devstack.realkube.nodes import LocalNode

logger = logging.getLogger(__name__)

#: The repository root (devstack/eventhub_balancer_devstack/stacks.py).
REPOSITORY = Path(__file__).resolve().parents[2]


def project_images() -> dict[str, deployments.LocalImage]:
    """What the project's own images run on the local node: the operator's and the consumer's
    entry point, and the example project's handler beside it (examples/orders)."""
    runtime = (sys.executable, "-m", "eventhub_balancer")
    return {
        "eventhub-balancer-operator": deployments.LocalImage(entrypoint=runtime),
        "eventhub-balancer-consumer": deployments.LocalImage(entrypoint=runtime),
        "eventhub-balancer-orders-example": deployments.LocalImage(
            entrypoint=runtime, env={"PYTHONPATH": str(REPOSITORY / "examples" / "orders")}
        ),
    }


#: The ports Event Hubs (AMQP without TLS), Azurite's blob service and a kind/minikube-like API
#: server conventionally use; 0 picks a free port (tests).
EVENTHUBS_PORT = 5672
BLOB_PORT = 10000
KUBE_PORT = 16443


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackOptions:
    hubs: Mapping[str, int] = dataclasses.field(default_factory=lambda: {"orders": 32})
    consumer_groups: tuple[str, ...] = ("$Default",)
    eventhubs_port: int = EVENTHUBS_PORT
    blob_port: int = BLOB_PORT
    kube_port: int = KUBE_PORT
    blob_location: Path | None = None
    state_dir: Path = Path(".ehb")
    namespace: str = "default"
    #: ``local``: the local API in this process; ``real``: the real control plane (etcd,
    #: kube-apiserver, kube-controller-manager as processes; `make controlplane` builds it).
    kube: kubeservers.Kind = "local"
    #: With the real control plane, run its pods on this machine (`realkube.nodes.LocalNode`)
    #: with these images; None: no node (a scenario's own kubelet runs the pods).
    node_images: Mapping[str, deployments.LocalImage] | None = None


class LocalStack:
    """Starts the three local services (each in its own thread or process) and stops them."""

    def __init__(
        self, options: StackOptions | None = None, *, kube: kubeservers.KubeServer | None = None
    ) -> None:
        """``kube``: the Kubernetes API server to start instead of one on
        ``options.kube_port`` in this process (a benchmark runs it in a process of its own)."""
        self.options = options or StackOptions()
        self.eventhubs = EventHubsEmulator(
            port=self.options.eventhubs_port,
            hubs=dict(self.options.hubs),
            consumer_groups=self.options.consumer_groups,
        )
        self.azurite = azurite_module.Azurite(
            port=self.options.blob_port, location=self.options.blob_location
        )
        self.kube = (
            kube
            if kube is not None
            else kubeservers.server(self.options.kube, port=self.options.kube_port)
        )
        self.kubeconfig: Path | None = None
        self.node: LocalNode | None = None
        self._exit = contextlib.ExitStack()

    def start(self) -> LocalStack:
        # Each stop is registered before its start (each is safe to call on what did not
        # start): a Ctrl-C that interrupts a start midway leaves nothing running.
        try:
            self._exit.callback(self.azurite.stop)
            self.azurite.start()
            self._exit.callback(self.eventhubs.stop_in_thread)
            self.eventhubs.start_in_thread()
            self._exit.callback(self.kube.stop)
            self.kube.start()
            self.kubeconfig = self.kube.write_kubeconfig(
                self.options.state_dir / "kubeconfig", namespace=self.options.namespace
            )
            if self.options.node_images is not None:
                self._start_node(self.options.node_images)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, images: Mapping[str, deployments.LocalImage]) -> None:
        from eventhub_balancer_devstack.realkube import RealControlPlane, nodes

        if not isinstance(self.kube, RealControlPlane):
            raise ValueError("a local node needs the real control plane (kube='real')")
        self.node = nodes.LocalNode(
            self.kube,
            images=images,
            state_dir=self.options.state_dir / "node",
            # Every service of the local stack is a development endpoint on loopback.
            node_env={"EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true"},
        )
        self._exit.callback(self.node.stop)
        self.node.start()

    def stop(self) -> None:
        """Stop whatever was started, in reverse order; safe to call more than once."""
        self._exit.close()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def eventhubs_connection_string(self) -> str:
        return self.eventhubs.connection_string()

    @property
    def blob_connection_string(self) -> str:
        return self.azurite.connection_string

    @property
    def fully_qualified_namespace(self) -> str:
        """The value for an EventHubConsumer's spec.eventHub.fullyQualifiedNamespace."""
        return self.eventhubs.fully_qualified_namespace

    def describe(self) -> list[str]:
        """How to reach each service, one line each (no secret beyond the well-known dev keys)."""
        lines = [
            f"Event Hubs emulator  {self.eventhubs_connection_string}",
            *(
                f"  hub {name}: {conditions.amount(count, 'partition')}"
                for name, count in self.options.hubs.items()
            ),
            f"Blob Storage         {self.blob_connection_string}",
            f"Kubernetes API       {self.kube.url}",
            f"  export KUBECONFIG={self.kubeconfig}",
        ]
        if self.node is not None and self.options.node_images is not None:
            images = ", ".join(sorted(self.options.node_images))
            lines.append(f"Node {self.node.name} runs the pods of: {images}")
        return lines
