"""The HTTP face of the local API server: a kmock handler that serves the object store.

kmock 0.8 contributes the server, the request records and its DSL (a test can still override
or fault-inject any request: ``handler['patch', kmock.resource('v1/pods')] << 500``); this
module replaces its in-memory emulator with :mod:`storage`, parses paths itself
(:mod:`addressing`), serves discovery from the live resource table (CRDs appear and disappear
as in a cluster) and streams watches with bookmarks, timeouts and resumption. ServiceAccounts
answer the TokenRequest API with tokens minted by :mod:`identities`.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering

from eventhub_balancer_devstack.kube import (
    addressing,
    admitting,
    failures,
    histories,
    identities,
    openapis,
    policies,
    resources,
    schemas,
    storage,
    tables,
    watchfaults,
)
from eventhub_balancer_devstack.kube import selectors as selecting

logger = logging.getLogger(__name__)

#: A real API server sends a bookmark about every minute; kopf reconnects after 70 s of silence.
BOOKMARK_INTERVAL = 30.0

#: How often an idle watch checks that its client is still connected (aiohttp does not cancel
#: handlers of closed connections).
DISCONNECT_POLL = 2.0

#: The shortest wait of an idle watch: a moment due now is handled at the top of its loop.
MIN_WAIT = 0.001

#: kmock records every request for assertions, and matches each new request by scanning that
#: record once per registered reaction: the cost of a request grows with the record. A server
#: that runs for minutes keeps only the latest few (enough for a test's `[:1] << 503` fault).
REQUESTS_KEPT = 50

_PATCH_TYPES: dict[str, admitting.PatchType] = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
}

#: Everything below a group version: resources, objects, subresources.
_RESOURCE_PATH = re.compile(r"/api/[^/]+/.+|/apis/[^/]+/[^/]+/.+")

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


def _guess_action(method: str, address: addressing.Address | None, watch: bool) -> Any:
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


@attrs.define(kw_only=True)
class LocalKubeHandler(kmock.KubernetesScaffold):
    """kmock's Kubernetes scaffold with a real object store behind every resource path."""

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
        request = self._parse_request(raw_request, body)
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

    def _parse_request(self, raw_request: aiohttp.web.BaseRequest, body: bytes) -> Any:
        address = addressing.parse(raw_request.path)
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
            action=_guess_action(raw_request.method, address, watch),
            resource=resource,
            namespace=address.namespace if address else None,
            name=address.name if address else None,
            subresource=address.subresource if address else None,
        )

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
        return aiohttp.web.json_response(failure.as_status(), status=failure.code)

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
            raise failures.no_such_path(request.url.path)
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_body(address.group, versions)}  # type: ignore[union-attr]

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
            raise failures.no_such_path(request.url.path)
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
            self._check_field_validation(request, spec)
        try:
            selector = selecting.parse(
                labels=params.get("labelSelector"), fields=params.get("fieldSelector")
            )
        except selecting.SelectorError as e:
            raise failures.bad_request(str(e)) from e

        if address.name is None:
            if method == "GET" and params.get("watch") in ("true", "1"):
                return _stream(self._watch_maybe_table(request, spec, namespace, selector))
            if method == "GET":
                listed = self._list(spec, namespace, selector, params)
                if tables.wants_table(str(request.headers.get("Accept", ""))):
                    return _response(
                        self._table(
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
                    admit=self._admission(request, spec, namespace, None, None),
                )
                return _response(created, status=201)
            if method == "DELETE":
                deleted = self.store.delete_collection(spec, namespace=namespace, selector=selector)
                return _response(self._list_body(spec, deleted, continue_token=""))
            raise failures.method_not_allowed(f"{method} is not supported on {request.url.path}")

        name = address.name
        subresource = address.subresource
        if subresource == "token" and spec.group == "" and spec.plural == "serviceaccounts":
            if method != "POST":
                raise failures.method_not_allowed(f"{method} is not supported on a token")
            return _response(self._token_request(spec, namespace, name, request.data), status=201)
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
                return _response(self._table(spec, [got], params))
            return _response(got)
        if method == "PUT":
            replaced = self.store.replace(
                spec,
                namespace=namespace,
                name=name,
                body=request.data,
                subresource=subresource,
                admit=self._admission(request, spec, namespace, name, subresource),
            )
            return _response(replaced)
        if method == "PATCH":
            content_type = str(request.headers.get("Content-Type", "")).split(";")[0].strip()
            patch_type = _PATCH_TYPES.get(content_type)
            if patch_type is None:
                raise failures.unsupported_media_type(content_type)
            patched = self.store.patch(
                spec,
                namespace=namespace,
                name=name,
                patch=request.data,
                patch_type=patch_type,
                subresource=subresource,
                admit=self._admission(request, spec, namespace, name, subresource),
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
                admit=self._admission(request, spec, namespace, name, None),
            )
            gone = not last["metadata"].get("deletionTimestamp")
            if spec.delete_returns_object or not gone:
                return _response(last)
            return _response(_status_success(spec, last))
        raise failures.method_not_allowed(f"{method} is not supported on {request.url.path}")

    def _token_request(
        self,
        spec: resources.ResourceSpec,
        namespace: str | None,
        name: str,
        body: Any,
    ) -> dict[str, Any]:
        """A TokenRequest for a ServiceAccount: 404 without it, 422 under 10 minutes."""
        account = self.store.get(spec, namespace=namespace, name=name)
        asked = (body or {}).get("spec") if isinstance(body, dict) else None
        asked = asked if isinstance(asked, dict) else {}
        seconds = asked.get("expirationSeconds") or identities.TOKEN_DEFAULT_SECONDS
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise failures.bad_request("spec.expirationSeconds: must be an integer")
        if seconds < identities.TOKEN_MIN_SECONDS:
            raise failures.invalid(
                plural="tokenrequests",
                group="authentication.k8s.io",
                name=name,
                message="spec.expirationSeconds: Invalid value: may not specify a duration "
                "less than 10 minutes",
            )
        audiences = [str(a) for a in asked.get("audiences") or [identities.DEFAULT_AUDIENCE]]
        issued = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        token = identities.service_account_token(
            namespace=namespace or "",
            name=name,
            uid=str(account["metadata"].get("uid") or ""),
            audiences=audiences,
            issued_at=int(issued.timestamp()),
            expiration_seconds=seconds,
        )
        expires = issued + datetime.timedelta(seconds=seconds)
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": None},
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }

    def _check_field_validation(self, request: Any, spec: resources.ResourceSpec) -> None:
        """``fieldValidation=Strict`` (kubectl's default): a field the schema lacks is a 400."""
        if request.params.get("fieldValidation") != "Strict" or spec.schema is None:
            return
        content_type = str(request.headers.get("Content-Type", "")).split(";")[0].strip()
        if content_type == "application/json-patch+json":
            return  # a list of operations, not an object to check field by field
        unknown = schemas.unknown_fields(request.data, spec.schema)
        if unknown:
            fields = ", ".join(f'unknown field "{path}"' for path in unknown)
            raise failures.bad_request(
                f'{spec.kind} in version "{spec.version}" cannot be handled as a {spec.kind}: '
                f"strict decoding error: {fields}"
            )

    def _admission(
        self,
        request: Any,
        spec: resources.ResourceSpec,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
    ) -> storage.Admit | None:
        """The ValidatingAdmissionPolicies of this request's user, run by the store on write."""
        raw = request._raw_request
        user = identities.user_of(
            request.headers.get("Authorization"),
            list(raw.headers.items()) if raw is not None else list(request.headers.items()),
        )
        store = self.store

        def admit(operation: str, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
            bindings = store.select(resources.POLICY_BINDINGS, namespace=None)
            if not bindings:
                return
            body = new if new is not None else old
            meta = (body or {}).get("metadata") or {}
            ns = str(meta.get("namespace") or namespace or "")
            namespace_object = None
            if ns and spec.namespaced:
                found = store.select(
                    resources.NAMESPACES,
                    namespace=None,
                    selector=selecting.parse(labels=None, fields=f"metadata.name={ns}"),
                )
                namespace_object = found[0] if found else None
            attrs = policies.Attributes(
                spec=spec,
                operation=operation,  # type: ignore[arg-type]
                name=str(meta.get("name") or name or ""),
                namespace=ns,
                subresource=subresource,
                new=new,
                old=old,
                user=user,
                namespace_object=namespace_object,
            )
            policies.admit(
                attrs,
                policies=store.select(resources.POLICIES, namespace=None),
                bindings=bindings,
            )

        return admit

    def _table(
        self,
        spec: resources.ResourceSpec,
        items: list[dict[str, Any]],
        params: Mapping[str, str],
        *,
        continue_token: str = "",
    ) -> dict[str, Any]:
        return tables.render(
            spec,
            items,
            now=self.store.now(),
            resource_version=self.store.resource_version,
            include_object=params.get("includeObject") or "Metadata",
            continue_token=continue_token,
        )

    def _list_body(
        self, spec: resources.ResourceSpec, items: list[dict[str, Any]], *, continue_token: str
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"resourceVersion": self.store.resource_version}
        if continue_token:
            metadata["continue"] = continue_token
        return {
            "kind": f"{spec.kind}List",
            "apiVersion": spec.api_version,
            "metadata": metadata,
            "items": items,
        }

    def _list(
        self,
        spec: resources.ResourceSpec,
        namespace: str | None,
        selector: selecting.Selector,
        params: Mapping[str, str],
    ) -> dict[str, Any]:
        items = self.store.select(spec, namespace=namespace, selector=selector)
        try:
            limit = int(params.get("limit") or 0)
            offset = int(params.get("continue") or 0)
        except ValueError as e:
            raise failures.bad_request(f"invalid limit or continue token: {e}") from e
        if limit <= 0:
            return self._list_body(spec, items[offset:], continue_token="")
        page = items[offset : offset + limit]
        more = offset + limit < len(items)
        body = self._list_body(spec, page, continue_token=str(offset + limit) if more else "")
        if more:
            body["metadata"]["remainingItemCount"] = len(items) - offset - limit
        return body

    async def _watch_maybe_table(
        self,
        request: Any,
        spec: resources.ResourceSpec,
        namespace: str | None,
        selector: selecting.Selector,
    ) -> AsyncIterator[Any]:
        """A watch whose objects are one-row Tables when asked (``kubectl get -w``)."""
        events = self._watch(request, spec, namespace, selector)
        if not tables.wants_table(str(request.headers.get("Accept", ""))):
            async for event in events:
                yield event
            return
        first = True
        async for event in events:
            if isinstance(event, dict) and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                table = self._table(spec, [event["object"]], request.params)
                if not first:  # as a real server: the columns come with the first event only
                    table["columnDefinitions"] = []
                first = False
                event = {"type": event["type"], "object": table}
            yield event

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

    async def _watch(
        self,
        request: Any,
        spec: resources.ResourceSpec,
        namespace: str | None,
        selector: selecting.Selector,
    ) -> AsyncIterator[Any]:
        params: Mapping[str, str] = request.params
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
        initial_events = params.get("sendInitialEvents") in ("true", "1")
        try:
            since_text = params.get("resourceVersion") or ""
            since = int(since_text) if since_text else 0
            timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        except ValueError as e:
            raise failures.bad_request(f"invalid resourceVersion or timeoutSeconds: {e}") from e

        loop = asyncio.get_running_loop()
        opened = loop.time()
        plural = spec.plural
        if since and not initial_events:
            expiring = watchfaults.gone(self.watch_faults, plural=plural, since=since, now=opened)
            if expiring is not None:
                self.watch_fault_effects["expired"] += 1
                yield b""
                status = failures.expired(
                    f"too old resource version: {since} ({expiring.gone_below})"
                ).as_status()
                yield {"type": "ERROR", "object": status}
                return

        # Subscribe and snapshot in one step (no await between): nothing can fall in between.
        subscription = self.store.subscribe(spec)
        try:
            #: (when the watch received it, its resource version, the event) in stream order;
            #: without faults each goes out at once, with `watchfaults` it may wait.
            held: collections.deque[tuple[float, int, dict[str, Any]]] = collections.deque()
            delivered = since  # the version of the last event sent (what a bookmark may say)
            if since == 0 or initial_events:
                initial = self.store.select(spec, namespace=namespace, selector=selector)
                seen = int(self.store.resource_version)
                for body in initial:
                    version = int(body["metadata"].get("resourceVersion") or 0)
                    held.append((opened, version, {"type": "ADDED", "object": body}))
                if initial_events and bookmarks:
                    held.append((opened, seen, self._bookmark(spec, end_of_initial_events=True)))
            else:
                seen = since
                for event in self.store.changes_since(spec, since):
                    rendered = self._for_watcher(event, spec, namespace, selector)
                    if rendered is not None:
                        held.append((opened, event.resource_version, rendered))
            yield b""  # send the headers now: clients wait for them before reading events

            deadline = opened + timeout if timeout is not None else None
            next_bookmark = opened + self.bookmark_interval
            raw_request = request._raw_request
            while True:
                faults = self.watch_faults
                while held and (
                    watchfaults.hold_until(faults, plural=plural, received=held[0][0])
                    <= loop.time()
                ):
                    _, version, item = held.popleft()
                    delivered = max(delivered, version)
                    yield item
                now = loop.time()
                if deadline is not None and now >= deadline:
                    return
                closes = watchfaults.closes_at(faults, plural=plural, opened=opened)
                if closes is not None and now >= closes:
                    self.watch_fault_effects["closed"] += 1
                    return
                if raw_request is not None and (
                    raw_request.transport is None or raw_request.transport.is_closing()
                ):
                    return
                if now >= next_bookmark:
                    next_bookmark = now + self.bookmark_interval
                    if bookmarks and not watchfaults.stalled(faults, plural=plural, now=now):
                        behind = held or watchfaults.lagging(faults, plural=plural, now=now)
                        if not behind:
                            yield self._bookmark(spec)
                        elif delivered:
                            # A lagging watch never claims a version it has not delivered.
                            yield self._bookmark(spec, resource_version=delivered)
                wake = [next_bookmark, now + DISCONNECT_POLL]
                for moment in (
                    deadline,
                    closes,
                    watchfaults.next_change(faults, plural=plural, now=now),
                    watchfaults.hold_until(faults, plural=plural, received=held[0][0])
                    if held
                    else None,
                ):
                    if moment is not None:
                        wake.append(moment)
                # Never 0: wait_for(..., 0) cancels the get before it can take a change.
                wait = max(MIN_WAIT, min(wake) - loop.time())
                change: histories.WatchEvent | histories.Signal | None
                if subscription.queue.empty():
                    try:
                        change = await asyncio.wait_for(subscription.queue.get(), timeout=wait)
                    except TimeoutError:
                        continue
                else:
                    change = subscription.queue.get_nowait()
                if change is None:
                    return  # the server is stopping
                if isinstance(change, histories.Signal) or change.resource_version <= seen:
                    continue
                rendered = self._for_watcher(change, spec, namespace, selector)
                if rendered is not None:
                    received = loop.time()
                    if (
                        watchfaults.hold_until(self.watch_faults, plural=plural, received=received)
                        > received
                    ):
                        self.watch_fault_effects["delayed"] += 1
                    held.append((received, change.resource_version, rendered))
        except failures.APIFailure as e:
            if e.code != 410:
                raise
            yield b""
            yield {"type": "ERROR", "object": e.as_status()}
        finally:
            self.store.unsubscribe(subscription)

    def _bookmark(
        self,
        spec: resources.ResourceSpec,
        *,
        end_of_initial_events: bool = False,
        resource_version: int | None = None,
    ) -> dict[str, Any]:
        version = self.store.resource_version if resource_version is None else resource_version
        metadata: dict[str, Any] = {"resourceVersion": str(version)}
        if end_of_initial_events:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {
            "type": "BOOKMARK",
            "object": {"kind": spec.kind, "apiVersion": spec.api_version, "metadata": metadata},
        }

    def _for_watcher(
        self,
        event: histories.WatchEvent,
        spec: resources.ResourceSpec,
        namespace: str | None,
        selector: selecting.Selector,
    ) -> dict[str, Any] | None:
        """The event as this watch sees it: objects entering or leaving its selection."""
        if namespace is not None and event.body["metadata"].get("namespace") != namespace:
            return None
        matches_now = selector.matches(event.body)
        matched_before = event.previous is not None and selector.matches(event.previous)
        event_type: str = event.type
        if event.type == "MODIFIED":
            if matches_now and not matched_before:
                event_type = "ADDED"
            elif matched_before and not matches_now:
                event_type = "DELETED"
            elif not matches_now:
                return None
        elif event.type == "DELETED":
            if not (matches_now or matched_before):
                return None
        elif not matches_now:
            return None
        return {"type": event_type, "object": self.store.render(spec, event.body)}
