"""Plain requests to a real API server, by resource name: what the local API's direct calls do.

The local API (`kube.LocalKubeAPI`) lets the harness reach its store without HTTP
(``create_object`` & co.). A real API server has no such door, so the same calls go over HTTPS
with the administrator's client certificate, through urllib3 (the kubernetes client's
transport).
Resources are named as there: ``v1/pods``, ``apps/v1/deployments``,
``eventhub-balancer.dev/v1alpha1/eventhubconsumers``.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

#: The longest wait for one request: a loaded 2-core machine answers well inside it.
REQUEST_TIMEOUT_S = 15.0

#: How often a 429 Too Many Requests is waited out before it is the answer (client-go: 10).
RETRIES_429 = 10

#: How long a new namespace may take to get its default ServiceAccount (well under a second).
NAMESPACE_READY_S = 30.0

#: Resources served cluster-wide; every other resource the harness names is namespaced.
CLUSTER_SCOPED = frozenset(
    {
        "namespaces",
        "nodes",
        "customresourcedefinitions",
        "clusterroles",
        "clusterrolebindings",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
        "priorityclasses",
    }
)


def split(resource: str) -> tuple[str, str, str]:
    """``v1/pods`` or ``group/version/plural`` -> (group, version, plural)."""
    parts = resource.strip("/").split("/")
    if len(parts) == 2:
        return "", parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise ValueError(f"resource {resource!r}: expected 'v1/plural' or 'group/version/plural'")


def path(resource: str, *, namespace: str | None = None, name: str | None = None) -> str:
    group, version, plural = split(resource)
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace is not None and plural not in CLUSTER_SCOPED:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return base if name is None else f"{base}/{name}"


class ResourceCalls:
    """Requests by resource name to one server (thread-safe: urllib3's pool).

    A failed request raises the kubernetes client's `ApiException`, with the status and the
    server's Status body, as the client would.
    """

    def __init__(self, *, server: str, ssl_context: ssl.SSLContext, pool_size: int = 8) -> None:
        self.server = server.rstrip("/")
        self.pool = urllib3.PoolManager(maxsize=pool_size, ssl_context=ssl_context)

    def close(self) -> None:
        self.pool.clear()

    def open(
        self,
        method: str,
        resource_path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: urllib3.Timeout | float = REQUEST_TIMEOUT_S,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        url = self.server + resource_path
        if query:
            url += "?" + urllib.parse.urlencode(dict(query))
        for attempt in range(RETRIES_429 + 1):
            response = self.pool.request(
                method,
                url,
                body=None if body is None else json.dumps(body).encode(),
                headers={"Accept": "application/json", "Content-Type": content_type},
                timeout=timeout,
                preload_content=not stream,
                retries=False,
            )
            # As client-go does: a 429 (a cache still initialising, priority and fairness)
            # is waited out for its Retry-After, a bounded number of times.
            if response.status != 429 or attempt == RETRIES_429:
                break
            response.drain_conn()
            time.sleep(min(float(response.headers.get("Retry-After") or 1), 1.0))
        if not 200 <= response.status <= 299:
            text = response.data.decode("utf-8", "replace")
            response.release_conn()
            raise ApiException(status=response.status, reason=_reason(text) or response.reason)
        return response

    def call(
        self,
        method: str,
        resource_path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        response = self.open(
            method, resource_path, body=body, query=query, content_type=content_type
        )
        return json.loads(response.data) if response.data else None

    def ensure_namespace(self, namespace: str) -> None:
        """Create the namespace unless it exists (the local API makes them on first use), and
        wait for its ``default`` ServiceAccount: pods are refused until the serviceaccount
        controller has made it."""
        try:
            self.call("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        except ApiException as e:
            if e.status != 409:
                raise
        deadline = time.monotonic() + NAMESPACE_READY_S
        while self.get("v1/serviceaccounts", "default", namespace=namespace) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"namespace {namespace} has no default ServiceAccount after "
                    f"{NAMESPACE_READY_S:g} s: is kube-controller-manager running?"
                )
            time.sleep(0.05)

    def create(
        self, resource: str, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        group, version, plural = split(resource)
        if namespace is None:
            namespace = (body.get("metadata") or {}).get("namespace")
        if namespace is not None and plural not in CLUSTER_SCOPED:
            self.ensure_namespace(namespace)
        full = dict(body)
        full.setdefault("apiVersion", f"{group}/{version}" if group else version)
        result: dict[str, Any] = self.call("POST", path(resource, namespace=namespace), body=full)
        return result

    def get(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.call(
                "GET", path(resource, namespace=namespace, name=name)
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return result

    def list(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        answer = self.call("GET", path(resource, namespace=namespace), query=query)
        items: list[dict[str, Any]] = answer.get("items") or []
        return items

    def patch(
        self,
        resource: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        target = path(resource, namespace=namespace, name=name)
        if subresource:
            target += f"/{subresource}"
        result: dict[str, Any] = self.call(
            "PATCH", target, body=dict(patch), content_type="application/merge-patch+json"
        )
        return result

    def delete(
        self,
        resource: str,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        result: dict[str, Any] = self.call(
            "DELETE", path(resource, namespace=namespace, name=name), body=body
        )
        return result

    def apply(self, resource: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create it, or replace what is there (as ``kubectl apply`` converges)."""
        metadata = body.get("metadata") or {}
        namespace = metadata.get("namespace")
        try:
            return self.create(resource, body, namespace=namespace)
        except ApiException as e:
            if e.status != 409:
                raise
        current = self.get(resource, metadata["name"], namespace=namespace) or {}
        replaced = dict(body)
        replaced["metadata"] = {
            **metadata,
            "resourceVersion": current["metadata"]["resourceVersion"],
        }
        result: dict[str, Any] = self.call(
            "PUT", path(resource, namespace=namespace, name=metadata["name"]), body=replaced
        )
        return result

    def established(self, crd: str) -> bool:
        """Whether the CRD named ``crd`` serves its resource yet."""
        body = self.get("apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        conditions = ((body or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _reason(text: str) -> str | None:
    """A Status body's message (what kubectl prints), else None."""
    try:
        status = json.loads(text)
    except ValueError:
        return None
    return (
        str(status.get("message")) if isinstance(status, dict) and status.get("message") else None
    )
