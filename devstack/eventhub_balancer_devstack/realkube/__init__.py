"""A real Kubernetes control plane for the local stack and the tests (``--kube real``).

kube-apiserver, kube-controller-manager and etcd, built from source by ``make controlplane``
(devstack/controlplane/), started on loopback with fresh keys: see `RealControlPlane`.
`nodes.LocalNode` is the kubelet that makes this machine a node of it.
"""

from eventhub_balancer_devstack.realkube.controlplanes import RealControlPlane

__all__ = ["RealControlPlane"]
