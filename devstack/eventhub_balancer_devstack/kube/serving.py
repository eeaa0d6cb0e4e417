"""The HTTP face of the local API server: a kmock handler that serves the object store.

kmock 0.8 contributes the server, the request records and its DSL (a test can still override
or fault-inject any request: ``handler['patch', kmock.resource('v1/pods')] << 500``); this
module replaces its in-memory emulator with :mod:`storage`, parses paths itself
(:mod:`addressing`), serves discovery from the live resource table (CRDs appear and disappear
as in a cluster; :mod:`discovery`) and streams watches with bookmarks, timeouts and resumption
(:mod:`watchstreams`). ServiceAccounts answer the TokenRequest API with tokens minted by
:mod:`identities` (:mod:`tokenrequests`). Here: the request dispatch and the resource CRUD, over
:mod:`listings` (LIST bodies and Tables) and :mod:`writechecks` (field validation, admission).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering

from eventhub_balancer_devstack.kube import (
    addressing,
    admitting,
    discovery,
    failures,
    fieldlabels,
    incoming,
    listings,
    resources,
    storage,
    tables,
    tokenrequests,
    watchfaults,
    watchstreams,
    writechecks,
)
from eventhub_balancer_devstack.kube import selectors as selecting

logger = logging.getLogger(__name__)

#: A real API server sends a bookmark about every minute; kopf reconnects after 70 s of silence.
BOOKMARK_INTERVAL = 30.0

#: kmock records every request for assertions, and matches each new request by scanning that
#: record once per registered reaction: the cost of a request grows with the record. A server
#: that runs for minutes keeps only the latest few (enough for a test's `[:1] << 503` fault).
REQUESTS_KEPT = 50

_PATCH_TYPES: dict[str, admitting.PatchType] = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
}


def _patch_types(spec: resources.ResourceSpec) -> dict[str, admitting.PatchType]:
    """The patches a resource takes: strategic merge patches only for built-in kinds (a
    custom resource has no schema of merge keys, and a real server refuses them with 415)."""
    if not spec.custom:
        return _PATCH_TYPES
    return {t: p for t, p in _PATCH_TYPES.items() if p != "strategic"}


#: Everything below a group version: resources, objects, subresources.
_RESOURCE_PATH = re.compile(r"/api/[^/]+/.+|/apis/[^/]+/[^/]+/.+")


def _response(payload: Any, *, status: int = 200) -> rendering.Response:
    return rendering.Response(status=status, payload=payload)


def _stream(payload: Any) -> rendering.Response:
    """A watch stream: JSON lines, labelled as JSON (kubectl's decoder refuses octet-stream)."""
    return rendering.Response(
        status=200, payload=payload, headers={"Content-Type": "application/json"}
    )


def _status_success(spec: resources.ResourceSpec, body: Mapping[str, Any]) -> dict[str, Any]:
    metadata = body.get("metadata") or {}
    details = {"name": metadata.get("name"), "kind": spec.plural, "uid": metadata.get("uid")}
    if spec.group:
        details["group"] = spec.group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


@attrs.define(kw_only=True)
class LocalKubeHandler(
    discovery.DiscoveryServing, watchstreams.WatchStreams, kmock.KubernetesScaffold
):
    """kmock's Kubernetes scaffold with a real object store behind every resource path.

    Discovery and OpenAPI come from `discovery.DiscoveryServing` (which overrides the
    scaffold's own), watch streams from `watchstreams.WatchStreams`."""

    store: storage.Store = attrs.field(factory=storage.Store)
    bookmark_interval: float = BOOKMARK_INTERVAL
    #: The watch faults in force (`watchfaults`), replaced whole when they change.
    watch_faults: tuple[watchfaults.WatchFault, ...] = ()
    #: What the watch faults did, so that a run can show they took effect: ``delayed``
    #: events, ``expired`` resumes (410), streams ``closed`` early.
    watch_fault_effects: collections.Counter[str] = attrs.field(factory=collections.Counter)
    #: The reaction that serves every resource path, and the reactions as built here: while
    #: they are all there are, a resource request goes straight to it (`_handle`).
    _resources: Any = attrs.field(init=False, default=None)
    _built: tuple[Any, ...] = attrs.field(init=False, default=())

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._resources = self.fallback[_RESOURCE_PATH] << self._serve_resource
        self.fallback["get", re.compile(r"/openapi/v2/?")] << self._serve_openapi_v2
        self.fallback["get", re.compile(r"/openapi/v3/?")] << self._serve_openapi_v3_index
        self.fallback["get", re.compile(r"/openapi/v3/.+")] << self._serve_openapi_v3
        # The kubernetes client asks for discovery with a trailing slash (/api/v1/, /version/).
        self.fallback["get", re.compile(r"/apis/[^/]+/[^/]+/")] << self._serve_version
        self.fallback["get", re.compile(r"/apis/[^/]+/")] << self._serve_group
        self.fallback["get", re.compile(r"/api/[^/]+/")] << self._serve_version
        self.fallback["get", re.compile(r"/(version|apis|api)/")] << self._serve_slashed_root
        self._built = tuple(self._payloads)

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        """kmock's dispatch tries every reaction's filters in turn, about a millisecond a
        request: half the server's CPU in a balance benchmark. None of the discovery reactions
        built before the resource one matches a resource path, so while no reaction was added
        (a test's injected fault, say), a resource request goes to it directly, as the scan
        would send it (`_serve_resource` always answers); anything else goes through the scan."""
        payloads = self._payloads
        if (
            len(payloads) == len(self._built)
            and all(a is b for a, b in zip(payloads, self._built, strict=True))
            and _RESOURCE_PATH.fullmatch(request.url.path)
        ):
            response: aiohttp.web.StreamResponse = await self._resources(request)
            return response
        response = await super()._handle(request)
        return response

    # -- the HTTP entry point ----------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        body = await raw_request.read()
        try:
            request = incoming.parse(raw_request, body)
        except failures.APIFailure as e:
            return self._render_failure(e)
        self._requests.append(request)
        if len(self._requests) > 2 * REQUESTS_KEPT:
            del self._requests[:-REQUESTS_KEPT]
        try:
            response: aiohttp.web.StreamResponse = await self._handle(request)
            return response
        except rendering.StreamingError as e:
            raw_response: aiohttp.web.StreamResponse = e.args[0]
            cause = e.__cause__ if isinstance(e.__cause__, Exception) else e
            if not raw_response.prepared:
                return self._render_failure(cause)
            status = self._as_failure(cause).as_status()
            line = json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
            try:
                await raw_response.write(line)
                await raw_response.write_eof()
            except ConnectionError:
                pass  # the client is gone; nothing to tell it
            return raw_response
        except Exception as e:
            return self._render_failure(e)

    def _as_failure(self, exc: BaseException) -> failures.APIFailure:
        if isinstance(exc, failures.APIFailure):
            return exc
        if isinstance(exc, kmock.KubernetesError):
            return failures.APIFailure(
                code=exc.status,
                reason=str(exc.reason or type(exc).__name__).replace(" ", ""),
                message=str(exc.message or exc),
            )
        if isinstance(exc, NotImplementedError):
            return failures.no_such_path("(no reaction)")
        logger.error("the local API server failed on a request", exc_info=exc)
        return failures.APIFailure(
            code=500, reason="InternalError", message=f"{type(exc).__name__}: {exc}"
        )

    def _render_failure(self, exc: BaseException) -> aiohttp.web.StreamResponse:
        failure = self._as_failure(exc)
        if failure.plain_text:
            return aiohttp.web.Response(text=failure.message + "\n", status=failure.code)
        return aiohttp.web.json_response(failure.as_status(), status=failure.code)

    # -- watch faults --------------------------------------------------------------------------

    def inject_watch_fault(
        self,
        kind: str,
        *,
        seconds: float,
        plural: str | None = None,
        lag_s: float = 0.0,
        close_after_s: float = 0.0,
    ) -> watchfaults.WatchFault:
        """Begin a watch fault now, for ``seconds`` (`watchfaults`); on the server's loop only."""
        now = asyncio.get_running_loop().time()
        # A compaction point no watch has reached yet: a fresh LIST gets a version past it.
        gone_below = self.store.advance_version() if kind == "gone" else 0
        fault = watchfaults.make(
            kind,
            now=now,
            seconds=seconds,
            plural=plural,
            lag_s=lag_s,
            close_after_s=close_after_s,
            gone_below=gone_below,
        )
        self.watch_faults = (*watchfaults.current(self.watch_faults, now=now), fault)
        self.store.wake_watches()
        logger.info("watch fault: %s on %s for %g s", kind, plural or "every resource", seconds)
        return fault

    def clear_watch_faults(self) -> None:
        """End every watch fault now: held events go out at once."""
        self.watch_faults = ()
        self.store.wake_watches()

    # -- resources ---------------------------------------------------------------------------

    async def _serve_resource(self, request: Any) -> rendering.Response:
        address = addressing.parse(request.url.path)
        if address is None or address.version is None or address.plural is None:
            raise failures.no_such_path(request.url.path)
        spec = self.store.resolve(
            group=address.group, version=address.version, plural=address.plural
        )
        params: Mapping[str, str] = request.params
        method: str = request.method
        namespace = address.namespace if spec.namespaced else None
        if method in ("POST", "PUT", "PATCH"):
            writechecks.check_field_validation(request, spec)
        if method in ("POST", "PUT") and address.subresource is None:
            writechecks.check_type_meta(request, spec, request.data)
        try:
            selector = fieldlabels.check(
                spec,
                selecting.parse(
                    labels=params.get("labelSelector"), fields=params.get("fieldSelector")
                ),
            )
        except (selecting.SelectorError, fieldlabels.FieldLabelError) as e:
            raise failures.bad_request(str(e)) from e

        if address.name is None:
            if method == "GET" and params.get("watch") in ("true", "1"):
                return _stream(self._watch_maybe_table(request, spec, namespace, selector))
            if method == "GET":
                listed = listings.list_objects(self.store, spec, namespace, selector, params)
                if tables.wants_table(str(request.headers.get("Accept", ""))):
                    return _response(
                        listings.table(
                            self.store,
                            spec,
                            listed["items"],
                            params,
                            continue_token=listed["metadata"].get("continue", ""),
                        )
                    )
                return _response(listed)
            if method == "POST":
                created = self.store.create(
                    spec,
                    namespace=namespace,
                    body=request.data,
                    admit=writechecks.admission(self.store, request, spec, namespace, None, None),
                )
                return _response(created, status=201)
            if method == "DELETE":
                deleted = self.store.delete_collection(spec, namespace=namespace, selector=selector)
                return _response(listings.list_body(self.store, spec, deleted, continue_token=""))
            raise failures.method_not_allowed(f"{method} is not supported on {request.url.path}")

        name = address.name
        subresource = address.subresource
        if subresource == "token" and spec.group == "" and spec.plural == "serviceaccounts":
            if method != "POST":
                raise failures.method_not_allowed(f"{method} is not supported on a token")
            return _response(
                tokenrequests.token_request(self.store, spec, namespace, name, request.data),
                status=201,
            )
        if subresource not in (None, "status") or (
            subresource == "status" and not spec.status_subresource
        ):
            raise failures.no_such_path(request.url.path)
        if method == "GET" and params.get("watch") in ("true", "1"):
            by_name = selecting.Selector(
                labels=selector.labels,
                fields=(
                    *selector.fields,
                    selecting.FieldRequirement(path="metadata.name", op="=", value=name),
                ),
            )
            return _stream(self._watch_maybe_table(request, spec, namespace, by_name))
        if method == "GET":
            got = self.store.get(spec, namespace=namespace, name=name)
            if subresource is None and tables.wants_table(str(request.headers.get("Accept", ""))):
                return _response(listings.table(self.store, spec, [got], params))
            return _response(got)
        if method == "PUT":
            replaced = self.store.replace(
                spec,
                namespace=namespace,
                name=name,
                body=request.data,
                subresource=subresource,
                admit=writechecks.admission(
                    self.store, request, spec, namespace, name, subresource
                ),
            )
            return _response(replaced)
        if method == "PATCH":
            content_type = str(request.headers.get("Content-Type", "")).split(";")[0].strip()
            accepted = _patch_types(spec)
            patch_type = accepted.get(content_type)
            if patch_type is None:
                raise failures.unsupported_media_type(accepted)
            writechecks.check_patch_shape(request, patch_type)
            writechecks.check_patched_fields(
                request, self.store, spec, namespace=namespace, name=name, patch_type=patch_type
            )
            patched = self.store.patch(
                spec,
                namespace=namespace,
                name=name,
                patch=request.data,
                patch_type=patch_type,
                subresource=subresource,
                admit=writechecks.admission(
                    self.store, request, spec, namespace, name, subresource
                ),
            )
            return _response(patched)
        if method == "DELETE" and subresource is None:
            options = request.data if isinstance(request.data, dict) else {}
            for key in ("propagationPolicy", "orphanDependents"):
                if key in params:
                    options = {**options, key: params[key]}
            last = self.store.delete(
                spec,
                namespace=namespace,
                name=name,
                options=options,
                admit=writechecks.admission(self.store, request, spec, namespace, name, None),
            )
            gone = not last["metadata"].get("deletionTimestamp")
            if spec.delete_returns_object or not gone:
                return _response(last)
            return _response(_status_success(spec, last))
        raise failures.method_not_allowed(f"{method} is not supported on {request.url.path}")
