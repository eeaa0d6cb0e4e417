"""What the Kubernetes authorizer sees of an HTTP request: Kubernetes' request-info rules.

A port of ``k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory.NewRequestInfo``: the
verb comes from the HTTP method (``GET`` on a collection is ``list``, with ``watch=true`` it is
``watch``, ``DELETE`` on a collection is ``deletecollection``), the namespace, resource, name and
subresource from the path. Paths outside ``/api`` and ``/apis`` are non-resource requests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

#: The path prefixes of resource requests: the legacy core group and the named groups.
API_PREFIXES = ("api", "apis")

#: HTTP methods to authorizer verbs, before the collection and watch adjustments.
METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}

#: Verbs that stand in the path before the resource (deprecated watch and proxy paths).
SPECIAL_VERBS = frozenset({"watch", "proxy"})

#: Subresources of a namespace object: /api/v1/namespaces/<ns>/status is not a resource "status".
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})

#: Query values Go's strconv.ParseBool reads as true (the watch parameter).
TRUE_VALUES = frozenset({"1", "t", "T", "TRUE", "true", "True"})


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class RequestInfo:
    """One request as RBAC sees it; ``path`` is set for non-resource requests only."""

    verb: str
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource_request(self) -> bool:
        return not self.path

    def describe(self) -> str:
        if not self.is_resource_request:
            return f"{self.verb} {self.path}"
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        group = f".{self.api_group}" if self.api_group else ""
        where = f" in {self.namespace}" if self.namespace else " (cluster)"
        name = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {what}{group}{name}{where}"


def _metadata_name_from(field_selector: str) -> str:
    """The name an exact ``metadata.name=X`` field selector pins a list or watch to."""
    for term in field_selector.split(","):
        for operator in ("==", "="):
            key, sep, value = term.partition(operator)
            if sep and key.strip() == "metadata.name" and "!" not in key:
                return value.strip()
    return ""


def request_info(method: str, path: str, query: Mapping[str, str] | None = None) -> RequestInfo:
    """The authorizer's view of ``method path?query``."""
    query = query or {}
    method = method.upper()
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) < 2 or parts[0] not in API_PREFIXES:
        return RequestInfo(verb=method.lower(), path="/" + "/".join(parts))
    prefix, parts = parts[0], parts[1:]
    if prefix == "apis":
        if len(parts) < 2:  # /apis/<group>: discovery
            return RequestInfo(verb=method.lower(), path="/" + "/".join([prefix, *parts]))
        group, version, parts = parts[0], parts[1], parts[2:]
    else:
        group, version, parts = "", parts[0], parts[1:]
    if not parts:  # /api/v1, /apis/<group>/<version>: discovery
        full = [prefix, *([group] if group else []), version]
        return RequestInfo(verb=method.lower(), path="/" + "/".join(full))

    verb = METHOD_VERBS.get(method, method.lower())
    # The special verbs come first in the path: /api/v1/watch/..., /api/v1/proxy/...
    if parts[0] in SPECIAL_VERBS:
        verb = parts[0]
        parts = parts[1:]

    namespace = ""
    if parts and parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        # /namespaces/<ns>/<resource>/...; but /namespaces/<ns>[/status] is the namespace itself.
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]

    resource = parts[0] if parts else ""
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""

    if not name and verb == "get":
        verb = "watch" if query.get("watch", "") in TRUE_VALUES else "list"
        name = _metadata_name_from(query.get("fieldSelector", ""))
    if not name and verb == "delete":
        verb = "deletecollection"

    return RequestInfo(
        verb=verb,
        api_group=group,
        api_version=version,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )
