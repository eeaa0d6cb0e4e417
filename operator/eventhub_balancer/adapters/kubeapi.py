"""The operator's one door to the Kubernetes API (apart from kopf's own watching).

`KubeAPI` has every call the operator makes; it is built in layers, one concern a module: the
client, its construction and its error wrapping in `kubeclients`, the reads in `kubereads`,
and the writes here, so that everything that changes the cluster is read in one place.

Writes are minimal by construction: callers pass what they want and the current body; the
adapter PATCHes (JSON merge patch) only a difference, with the resourceVersion read as a
precondition where the pod or a second operator could race us.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeclients, kubereads
from eventhub_balancer.contracts import configmaps, specs

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Kept importable from here, where the callers have always found them.
REQUEST_TIMEOUT = kubeclients.REQUEST_TIMEOUT
WORKERS = kubeclients.WORKERS
ConnectionInfo = kubeclients.ConnectionInfo


class KubeAPI(kubereads.KubeReads):
    """Async facade over the sync client; one per operator process (or test)."""

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._count("configmap")
        result: dict[str, Any] = await self._call(
            f"create ConfigMap {namespace}/{body.get('metadata', {}).get('name')}",
            self._core.create_namespaced_config_map,
            namespace=namespace,
            body=dict(body),
        )
        return result

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        """Merge-patch; with ``resource_version`` the write fails (Conflict) if it changed."""
        body = dict(patch)
        if resource_version:
            body["metadata"] = {**body.get("metadata", {}), "resourceVersion": resource_version}
        self._count("configmap")
        result: dict[str, Any] = await self._call(
            f"patch ConfigMap {namespace}/{name}",
            self._core.patch_namespaced_config_map,
            namespace=namespace,
            name=name,
            body=body,
            _content_type=MERGE_PATCH,
        )
        return result

    async def replace_configmap_data(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        generation: str,
        data: Mapping[str, str],
    ) -> dict[str, Any]:
        """A JSON patch whose ``test`` operations are the precondition: the ConfigMap is still
        ``uid`` and its data still at ``generation``; then its data is replaced. A failed test
        (the API server answers 422) is a Conflict."""
        operations = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": f"/data/{configmaps.KEY_GENERATION}", "value": generation},
            {"op": "add", "path": "/data", "value": dict(data)},
        ]
        self._count("configmap")
        what = f"patch ConfigMap {namespace}/{name}"
        try:
            result: dict[str, Any] = await self._call(
                what,
                self._core.patch_namespaced_config_map,
                namespace=namespace,
                name=name,
                body=operations,
                _content_type=JSON_PATCH,
            )
        except errors.ApiRejected as e:
            raise errors.Conflict(f"{what}: conflict (changed since read: {e})") from e
        return result

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None:
        """Delete, guarded by uid so that a re-created namesake survives; gone already is fine."""
        self._count("configmap")
        body: dict[str, Any] = {"preconditions": {"uid": uid}} if uid else {}
        with contextlib.suppress(errors.NotFound):
            await self._call(
                f"delete ConfigMap {namespace}/{name}",
                self._core.delete_namespaced_config_map,
                namespace=namespace,
                name=name,
                body=body,
            )

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any] | None:
        """The pod as patched; None when it is gone (nothing left to annotate)."""
        self._count("pod")
        with contextlib.suppress(errors.NotFound):
            result: dict[str, Any] = await self._call(
                f"annotate Pod {namespace}/{name}",
                self._core.patch_namespaced_pod,
                namespace=namespace,
                name=name,
                body={"metadata": {"annotations": dict(annotations)}},
                _content_type=MERGE_PATCH,
            )
            return result
        return None

    async def patch_consumer_status(
        self,
        *,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> specs.ConsumerBody:
        """Merge-patch the status; with ``resource_version`` the write fails (Conflict) if the
        CR changed since it was read: the status carries the epochs, which must never be
        written from a stale read."""
        patch: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        self._count("status")
        body: specs.ConsumerBody = await self._call(
            f"patch EventHubConsumer {namespace}/{name} status",
            self._custom.patch_namespaced_custom_object_status,
            group=specs.GROUP,
            version=specs.VERSION,
            namespace=namespace,
            plural=specs.PLURAL,
            name=name,
            body=patch,
            _content_type=MERGE_PATCH,
        )
        return body

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        self._count("event")
        await self._call(
            f"create Event in {namespace}",
            self._core.create_namespaced_event,
            namespace=namespace,
            body=dict(body),
        )
