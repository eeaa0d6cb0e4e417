"""Discovery and OpenAPI from the live resource table: `serving.LocalKubeHandler`'s mixin.

The methods named as kmock's scaffold names them override it: the scaffold registers
``_serve_version``, ``_serve_group``, ``_serve_apis``, ``_serve_api`` and
``_serve_server_version`` itself, and `serving` adds the routes for the rest. CRDs appear and
disappear here as in a cluster, since every answer reads `storage.Store.resources` anew.
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.kube import addressing, failures, openapis, resources, storage

_SERVER_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-ehb-local",
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "",
    "goVersion": "",
    "compiler": "gc",
    "platform": "linux/amd64",
}


class DiscoveryServing:
    """The discovery and OpenAPI endpoints of `serving.LocalKubeHandler`, over its ``store``."""

    __slots__ = ()

    store: storage.Store

    # -- discovery ---------------------------------------------------------------------------

    async def _serve_server_version(self, request: Any) -> Any:
        return dict(_SERVER_VERSION)

    async def _serve_slashed_root(self, request: Any) -> Any:
        path = request.url.path.strip("/")
        if path == "version":
            return await self._serve_server_version(request)
        return await (self._serve_apis(request) if path == "apis" else self._serve_api(request))

    async def _serve_api(self, request: Any) -> Any:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }

    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for group, version, _ in self.store.resources:
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)
        return groups

    def _group_body(self, group: str, versions: list[str]) -> dict[str, Any]:
        # The preferred version is the first listed (CRDs list their storage version first
        # in practice); real servers use a priority order, which no client here depends on.
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    async def _serve_apis(self, request: Any) -> Any:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group_body(g, vs) for g, vs in sorted(self._groups().items())],
        }

    async def _serve_group(self, request: Any) -> Any:
        address = addressing.parse(request.url.path)
        versions = self._groups().get(address.group if address else "")
        if not versions:
            raise failures.page_not_found(request.url.path)
        body = self._group_body(address.group, versions)  # type: ignore[union-attr]
        return {"kind": "APIGroup", "apiVersion": "v1", **body}

    async def _serve_version(self, request: Any) -> Any:
        address = addressing.parse(request.url.path)
        if address is None or address.version is None:
            raise failures.no_such_path(request.url.path)
        served = [
            spec
            for (group, version, _), spec in sorted(self.store.resources.items())
            if group == address.group and version == address.version
        ]
        if not served:
            raise failures.page_not_found(request.url.path)
        entries: list[dict[str, Any]] = []
        for spec in served:
            entries.append(
                {
                    "name": spec.plural,
                    "singularName": spec.singular,
                    "namespaced": spec.namespaced,
                    "kind": spec.kind,
                    "verbs": list(resources.VERBS),
                    "shortNames": list(spec.short_names),
                    "categories": list(spec.categories),
                }
            )
            if spec.status_subresource:
                entries.append(
                    {
                        "name": f"{spec.plural}/status",
                        "singularName": "",
                        "namespaced": spec.namespaced,
                        "kind": spec.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        group_version = f"{address.group}/{address.version}" if address.group else address.version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": entries,
        }

    # -- OpenAPI -----------------------------------------------------------------------------

    def _by_group_version(self) -> dict[str, list[resources.ResourceSpec]]:
        served: dict[str, list[resources.ResourceSpec]] = {}
        for _, spec in sorted(self.store.resources.items()):
            served.setdefault(openapis.group_version_path(spec), []).append(spec)
        return served

    async def _serve_openapi_v2(self, request: Any) -> Any:
        return openapis.v2_document(self.store.resources.values())

    async def _serve_openapi_v3_index(self, request: Any) -> Any:
        documents = {
            path: openapis.v3_document(specs) for path, specs in self._by_group_version().items()
        }
        return openapis.v3_index(documents)

    async def _serve_openapi_v3(self, request: Any) -> Any:
        path = request.url.path.removeprefix("/openapi/v3/").strip("/")
        specs = self._by_group_version().get(path)
        if not specs:
            raise failures.no_such_path(request.url.path)
        return openapis.v3_document(specs)
