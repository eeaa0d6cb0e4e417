"""The local API's object calls, made on the real control plane as its administrator.

The harness writes and reads objects through ``create_object``, ``get_object`` & co. and
records writes with ``record_writes``/``take_writes`` on either server
(`kubeservers.KubeServer`). The local API (`kube.LocalKubeAPI`) serves them in process;
`RealControlPlane` (in ``controlplanes.py``) takes them from `ObjectCalls`, which makes each
one over HTTPS (`resourcecalls.ResourceCalls`) and keeps the write record from a watch
(`writerecords.WatchWriteRecord`).
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.kube import histories
from eventhub_balancer_devstack.realkube import resourcecalls, writerecords


class ObjectCalls:
    """The object calls and the write record of a running server; `RealControlPlane` sets
    ``_calls`` when it starts and clears it (and stops ``_record``) when it stops."""

    _calls: resourcecalls.ResourceCalls | None
    _record: writerecords.WatchWriteRecord | None

    @property
    def calls(self) -> resourcecalls.ResourceCalls:
        if self._calls is None:
            raise RuntimeError("the control plane is not running: call start() first")
        return self._calls

    def create_object(
        self, resource: str, body: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Create it (its namespace too, when missing, as the local API does)."""
        return self.calls.create(resource, body, namespace=namespace)

    def apply_object(self, resource: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create it, or replace what is there (as ``kubectl apply`` converges)."""
        return self.calls.apply(resource, body)

    def get_object(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        return self.calls.get(resource, name, namespace=namespace)

    def list_objects(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        return self.calls.list(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    def patch_object(
        self,
        resource: str,
        name: str,
        patch: dict[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        return self.calls.patch(resource, name, patch, namespace=namespace, subresource=subresource)

    def delete_object(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return self.calls.delete(resource, name, namespace=namespace)

    # -- the write record ----------------------------------------------------------------------

    def record_writes(self, *resources_: str) -> None:
        """Keep every committed write of these resources (``v1/configmaps``...) until read."""
        if self._record is None:
            self._record = writerecords.WatchWriteRecord(self.calls)
        for resource in resources_:
            self._record.record(resource)

    def take_writes(self) -> histories.Writes:
        if self._record is None:
            return histories.Writes(events=(), dropped=0)
        return self._record.take()
