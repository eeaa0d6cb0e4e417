"""Incoming requests, recorded as kmock records them: where they point, what they do, and
their bodies decoded (JSON, or the protobuf kubectl sends: `protobufs`).

kmock matches its reactions (a test's injected faults) against these records, and the
handler (`serving`) serves them; the path is parsed here as the API server routes it
(`addressing`).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp.web
import kmock

from eventhub_balancer_devstack.kube import addressing, failures, protobufs


def _action(method: str, address: addressing.Address | None, watch: bool) -> Any:
    if address is None or address.plural is None:
        return None
    if method == "GET":
        return (
            kmock.action.WATCH
            if watch
            else (kmock.action.FETCH if address.name else kmock.action.LIST)
        )
    if method == "POST":
        return kmock.action.CREATE
    if method == "PATCH":
        return kmock.action.UPDATE
    if method == "DELETE" and address.name:
        return kmock.action.DELETE
    return None


def parse(raw_request: aiohttp.web.BaseRequest, body: bytes) -> Any:
    """kmock's record of one request: where it points, what it does, its body decoded (JSON,
    or kubectl's protobuf); an `failures.APIFailure` for a body it cannot read."""
    address = addressing.parse(raw_request.path)
    content_type = str(raw_request.headers.get("Content-Type", "")).split(";")[0].strip()
    data: Any
    if content_type == protobufs.CONTENT_TYPE and body:
        data = _protobuf(body)
        text = json.dumps(data)
    else:
        text = body.decode("utf-8", errors="replace")
        try:
            data = json.loads(text) if text.strip() else None
        except ValueError:
            data = None
    resource = None
    if address is not None and address.version is not None:
        resource = kmock.resource(
            group=address.group, version=address.version, plural=address.plural
        )
    elif address is not None and address.group:
        resource = kmock.resource(group=address.group)
    watch = raw_request.query.get("watch") in ("true", "1")
    return kmock.Request(
        raw_request=raw_request,
        url=raw_request.url,
        method=raw_request.method,
        params=dict(raw_request.query),
        headers=dict(raw_request.headers),
        cookies=dict(raw_request.cookies),
        body=body,
        text=text,
        data=data,
        action=_action(raw_request.method, address, watch),
        resource=resource,
        namespace=address.namespace if address else None,
        name=address.name if address else None,
        subresource=address.subresource if address else None,
    )


def _protobuf(body: bytes) -> dict[str, Any]:
    try:
        return protobufs.decode(body)
    except protobufs.Unreadable as e:
        raise failures.unreadable_protobuf(str(e)) from e
    except protobufs.ProtobufError as e:
        raise failures.bad_request(f"the protobuf body cannot be decoded: {e}") from e
