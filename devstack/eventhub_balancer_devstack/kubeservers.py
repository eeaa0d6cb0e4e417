"""Either Kubernetes API server, behind one shape: the local one or the real control plane.

Every scenario, benchmark and the demo run on either (``--kube local|real``). The local API
(`kube.LocalKubeAPI`) is fast to start and injects faults on demand; the real control plane
(`realkube.RealControlPlane`: etcd, kube-apiserver, kube-controller-manager) is the reference
it is checked against. `KubeServer` is what the harness may use of both; a caller that needs
the local API's faults checks `supports_faults` (or the type) first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol, Self

from eventhub_balancer import errors
from eventhub_balancer_devstack.kube import LocalKubeAPI, histories, identities

Kind = Literal["local", "real"]
KINDS: tuple[Kind, ...] = ("local", "real")


class KubeServer(Protocol):
    supports_faults: bool

    @property
    def url(self) -> str: ...

    def start(self) -> Self: ...

    def stop(self) -> None: ...

    def write_kubeconfig(
        self,
        path: Path,
        *,
        namespace: str = "default",
        identity: identities.PodIdentity | None = None,
    ) -> Path: ...

    def create_object(
        self, resource: str, body: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    def get_object(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None: ...

    def list_objects(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def patch_object(
        self,
        resource: str,
        name: str,
        patch: dict[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...

    def delete_object(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    def record_writes(self, *resources_: str) -> None: ...

    def take_writes(self) -> histories.Writes: ...


def parse_kind(value: str) -> Kind:
    """``--kube``'s value, or one clear error."""
    if value not in KINDS:
        raise errors.InvalidInput("--kube", f"{value!r}: choose local or real")
    return value


def server(kind: Kind, *, port: int = 0, crds_dir: Path | None = None) -> KubeServer:
    """A server of that kind, not yet started (``crds_dir``: the repository's by default)."""
    if kind == "real":
        from eventhub_balancer_devstack.realkube import RealControlPlane, controlplanes

        return RealControlPlane(port=port, crds_dir=crds_dir or controlplanes.REPOSITORY_CRDS)
    if crds_dir is None:
        return LocalKubeAPI(port=port)
    return LocalKubeAPI(port=port, crds_dir=crds_dir)
