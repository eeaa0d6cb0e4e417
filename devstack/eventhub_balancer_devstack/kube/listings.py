"""The bodies of a LIST: the ``...List`` object, its pages, and its Table rendering.

Plain functions over the object store, for `serving` (a GET of a collection or an object) and
`watchstreams` (``kubectl get -w``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventhub_balancer_devstack.kube import failures, resources, storage, tables
from eventhub_balancer_devstack.kube import selectors as selecting


def table(
    store: storage.Store,
    spec: resources.ResourceSpec,
    items: list[dict[str, Any]],
    params: Mapping[str, str],
    *,
    continue_token: str = "",
) -> dict[str, Any]:
    return tables.render(
        spec,
        items,
        now=store.now(),
        resource_version=store.resource_version,
        include_object=params.get("includeObject") or "Metadata",
        continue_token=continue_token,
    )


def list_body(
    store: storage.Store,
    spec: resources.ResourceSpec,
    items: list[dict[str, Any]],
    *,
    continue_token: str,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": store.resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": f"{spec.kind}List",
        "apiVersion": spec.api_version,
        "metadata": metadata,
        "items": items,
    }


def list_objects(
    store: storage.Store,
    spec: resources.ResourceSpec,
    namespace: str | None,
    selector: selecting.Selector,
    params: Mapping[str, str],
) -> dict[str, Any]:
    items = store.select(spec, namespace=namespace, selector=selector)
    try:
        limit = int(params.get("limit") or 0)
        offset = int(params.get("continue") or 0)
    except ValueError as e:
        raise failures.bad_request(f"invalid limit or continue token: {e}") from e
    if limit <= 0:
        return list_body(store, spec, items[offset:], continue_token="")
    page = items[offset : offset + limit]
    more = offset + limit < len(items)
    body = list_body(store, spec, page, continue_token=str(offset + limit) if more else "")
    if more:
        body["metadata"]["remainingItemCount"] = len(items) - offset - limit
    return body
