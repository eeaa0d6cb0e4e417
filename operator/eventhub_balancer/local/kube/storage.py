"""The object store of the local API server: what a real API server does on top of etcd.

It sets the server-owned metadata (``resourceVersion`` from one global counter, ``uid``,
``creationTimestamp``, ``generation``, the namespace from the URL), enforces optimistic
concurrency (409 on a stale ``resourceVersion``), the status subresource split, deletion with
finalizers and garbage collection through ``ownerReferences``, and keeps a bounded history of
changes so that watches can resume from a resource version (410 Gone once it is compacted).

All methods are synchronous and must be called on the server's event loop only: every
operation is atomic because nothing in it awaits, which is what makes the resource versions
strictly ordered without locks.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import dataclasses
import datetime
import logging
import re
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from eventhub_balancer.local.kube import failures, patching, resources, schemas
from eventhub_balancer.local.kube import selectors as selecting

logger = logging.getLogger(__name__)

Body = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
PatchType = Literal["merge", "strategic", "json"]
ObjectKey = tuple[str, str]  # (namespace or "", name)

#: How many changes watches can resume from; an older resourceVersion gets 410 Gone.
HISTORY_SIZE = 10_000

#: Namespaces a fresh cluster has.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

#: The alphabet of generateName suffixes: the API server's, without vowels and look-alikes.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

_EVERYTHING = selecting.Selector()


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchEvent:
    """One committed change; ``previous`` lets selector-filtered watches see objects leave."""

    type: EventType
    storage_key: tuple[str, str]
    body: Body
    previous: Body | None
    resource_version: int


@dataclasses.dataclass(eq=False, kw_only=True)
class Subscription:
    """A live watch: changes of one kind arrive in the queue, ``None`` means the server stops."""

    storage_key: tuple[str, str]
    queue: asyncio.Queue[WatchEvent | None] = dataclasses.field(default_factory=asyncio.Queue)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


def _timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _content(body: Mapping[str, Any], *, without_status: bool) -> dict[str, Any]:
    """What ``generation`` counts: everything but metadata (and status if it is separate)."""
    skipped = {"metadata", "apiVersion", "kind"} | ({"status"} if without_status else set())
    return {k: v for k, v in body.items() if k not in skipped}


class Store:
    """Objects of all resources, their history, and the live watches on them."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime.datetime] = _utc_now,
        history_size: int = HISTORY_SIZE,
        auto_namespaces: bool = True,
    ) -> None:
        self._clock = clock
        self._auto_namespaces = auto_namespaces
        self._resource_version = 0
        self._compacted = 0  # the highest resource version that fell out of the history
        self._history: collections.deque[WatchEvent] = collections.deque(maxlen=history_size)
        self._objects: dict[tuple[str, str], dict[ObjectKey, Body]] = collections.defaultdict(dict)
        self._subscriptions: set[Subscription] = set()
        self.resources: dict[tuple[str, str, str], resources.ResourceSpec] = {}
        for spec in resources.BUILTINS:
            self.resources[(spec.group, spec.version, spec.plural)] = spec
        for name in INITIAL_NAMESPACES:
            self.create(resources.NAMESPACES, namespace=None, body={"metadata": {"name": name}})
        for crd in resources.KOPF_PEERING_CRDS:
            self.create(resources.CRDS, namespace=None, body=crd)

    # -- resources ---------------------------------------------------------------------------

    def resolve(self, *, group: str, version: str, plural: str) -> resources.ResourceSpec:
        try:
            return self.resources[(group, version, plural)]
        except KeyError:
            raise failures.no_such_path(
                f"/{'apis/' + group if group else 'api'}/{version}/{plural}"
            ) from None

    @property
    def resource_version(self) -> str:
        return str(self._resource_version)

    # -- reading -----------------------------------------------------------------------------

    def get(self, spec: resources.ResourceSpec, *, namespace: str | None, name: str) -> Body:
        body = self._objects[spec.storage_key].get((self._ns(spec, namespace), name))
        if body is None:
            raise failures.not_found(plural=spec.plural, group=spec.group, name=name)
        return self.render(spec, body)

    def select(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        selector: selecting.Selector = _EVERYTHING,
    ) -> list[Body]:
        """Matching objects sorted by namespace and name; ``namespace=None`` means all of them."""
        matched = [
            self.render(spec, body)
            for (ns, _), body in sorted(self._objects[spec.storage_key].items())
            if (namespace is None or not spec.namespaced or ns == namespace)
            and selector.matches(body)
        ]
        return matched

    def render(self, spec: resources.ResourceSpec, body: Mapping[str, Any]) -> Body:
        """A copy of a stored body as served in ``spec``'s group version."""
        rendered = copy.deepcopy(dict(body))
        rendered["apiVersion"] = spec.api_version
        rendered["kind"] = spec.kind
        return rendered

    # -- watching ----------------------------------------------------------------------------

    def subscribe(self, spec: resources.ResourceSpec) -> Subscription:
        subscription = Subscription(storage_key=spec.storage_key)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    def changes_since(
        self, spec: resources.ResourceSpec, resource_version: int
    ) -> list[WatchEvent]:
        """The history of one kind after a version; 410 Gone if that part is compacted."""
        if resource_version < self._compacted:
            raise failures.expired(
                f"too old resource version: {resource_version} ({self._compacted + 1})"
            )
        return [
            event
            for event in self._history
            if event.resource_version > resource_version and event.storage_key == spec.storage_key
        ]

    def close_subscriptions(self) -> None:
        """End every watch (the server is stopping)."""
        for subscription in self._subscriptions:
            subscription.queue.put_nowait(None)
        self._subscriptions.clear()

    def _emit(
        self, event_type: EventType, spec: resources.ResourceSpec, body: Body, previous: Body | None
    ) -> None:
        if self._history.maxlen is not None and len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].resource_version
        event = WatchEvent(
            type=event_type,
            storage_key=spec.storage_key,
            body=copy.deepcopy(body),
            previous=copy.deepcopy(previous),
            resource_version=self._resource_version,
        )
        self._history.append(event)
        for subscription in self._subscriptions:
            if subscription.storage_key == spec.storage_key:
                subscription.queue.put_nowait(event)

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    # -- writing -----------------------------------------------------------------------------

    def create(self, spec: resources.ResourceSpec, *, namespace: str | None, body: Any) -> Body:
        if not isinstance(body, dict):
            raise failures.bad_request("the request body must be a JSON object")
        new = copy.deepcopy(body)
        metadata = new.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise failures.bad_request("metadata must be an object")
        ns = self._namespace_for_write(spec, namespace, metadata)
        objects = self._objects[spec.storage_key]
        name = str(metadata.get("name") or "")
        if not name:
            prefix = metadata.get("generateName")
            if not prefix:
                raise failures.invalid(
                    plural=spec.plural,
                    group=spec.group,
                    name=None,
                    message="metadata.name: Required value: name or generateName is required",
                )
            for _ in range(100):  # collisions are rare; the bound only guards a full namespace
                suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
                name = f"{prefix[: 63 - _SUFFIX_LENGTH]}{suffix}"
                if (ns, name) not in objects:
                    break
            metadata["name"] = name
        self._validate_metadata(spec, metadata)
        if (ns, name) in objects:
            raise failures.already_exists(plural=spec.plural, group=spec.group, name=name)
        if spec.namespaced:
            self._ensure_namespace(ns, for_spec=spec)

        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            metadata.pop(key, None)
        if spec.namespaced:
            metadata["namespace"] = ns
        else:
            metadata.pop("namespace", None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = _timestamp(self._clock())
        if spec.generation:
            metadata["generation"] = 1
        else:
            metadata.pop("generation", None)
        if spec.status_subresource:
            new.pop("status", None)  # the main endpoint never sets status
        self._prepare(spec, new, created=True)
        metadata["resourceVersion"] = self._next_version()
        new["apiVersion"] = spec.api_version
        new["kind"] = spec.kind
        if spec.storage_key == resources.CRDS.storage_key:
            self._register_crd(new)  # first: a malformed CRD is refused before it is stored
        objects[(ns, name)] = new
        self._emit("ADDED", spec, new, None)
        return self.render(spec, new)

    def replace(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str | None = None,
    ) -> Body:
        if not isinstance(body, dict):
            raise failures.bad_request("the request body must be a JSON object")
        metadata = body.get("metadata") or {}
        if metadata.get("name") not in (None, name):
            raise failures.bad_request(
                f"the name of the object ({metadata.get('name')}) does not match the name "
                f"on the URL ({name})"
            )
        return self._update(spec, namespace=namespace, name=name, new=body, subresource=subresource)

    def patch(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: PatchType,
        subresource: str | None = None,
    ) -> Body:
        current = self._stored(spec, namespace, name)
        try:
            if patch_type == "json":
                new = patching.apply_json_patch(current, patch)
            else:
                if not isinstance(patch, dict):
                    raise patching.PatchError("a merge patch must be a JSON object")
                new = patching.merge(current, patch)
        except patching.PatchTestFailed as e:
            raise failures.invalid(
                plural=spec.plural, group=spec.group, name=name, message=str(e)
            ) from e
        except patching.PatchError as e:
            raise failures.invalid(
                plural=spec.plural, group=spec.group, name=name, message=f"invalid patch: {e}"
            ) from e
        if not isinstance(new, dict):
            raise failures.bad_request("the patch turned the object into a non-object")
        return self._update(spec, namespace=namespace, name=name, new=new, subresource=subresource)

    def delete(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> Body:
        """Delete now, or mark for deletion while finalizers remain; returns the last state."""
        options = options or {}
        current = self._stored(spec, namespace, name)
        preconditions = options.get("preconditions") or {}
        meta = current["metadata"]
        for field in ("uid", "resourceVersion"):
            wanted = preconditions.get(field)
            if wanted is not None and wanted != meta.get(field):
                raise failures.conflict(plural=spec.plural, group=spec.group, name=name)
        orphan = options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents")
        return self._delete(spec, current, cascade=not orphan)

    def delete_collection(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        selector: selecting.Selector,
    ) -> list[Body]:
        deleted = []
        for body in self.select(spec, namespace=namespace, selector=selector):
            stored = self._stored(spec, body["metadata"].get("namespace"), body["metadata"]["name"])
            deleted.append(self._delete(spec, stored, cascade=True))
        return deleted

    # -- internals ---------------------------------------------------------------------------

    def _ns(self, spec: resources.ResourceSpec, namespace: str | None) -> str:
        return (namespace or "") if spec.namespaced else ""

    def _stored(self, spec: resources.ResourceSpec, namespace: str | None, name: str) -> Body:
        body = self._objects[spec.storage_key].get((self._ns(spec, namespace), name))
        if body is None:
            raise failures.not_found(plural=spec.plural, group=spec.group, name=name)
        return body

    def _namespace_for_write(
        self, spec: resources.ResourceSpec, namespace: str | None, metadata: Mapping[str, Any]
    ) -> str:
        if not spec.namespaced:
            return ""
        in_body = metadata.get("namespace")
        if namespace and in_body and in_body != namespace:
            raise failures.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        ns = namespace or in_body
        if not ns:
            raise failures.bad_request(f"{spec.plural} are namespaced: the URL needs a namespace")
        return str(ns)

    def _ensure_namespace(self, namespace: str, *, for_spec: resources.ResourceSpec) -> None:
        known = self._objects[resources.NAMESPACES.storage_key]
        existing = known.get(("", namespace))
        if existing is None:
            if not self._auto_namespaces:
                raise failures.not_found(plural="namespaces", group="", name=namespace)
            self.create(
                resources.NAMESPACES, namespace=None, body={"metadata": {"name": namespace}}
            )
        elif existing["metadata"].get("deletionTimestamp"):
            raise failures.APIFailure(
                code=403,
                reason="Forbidden",
                message=f"{for_spec.plural} is forbidden: unable to create new content in "
                f"namespace {namespace} because it is being terminated",
            )

    def _validate_metadata(self, spec: resources.ResourceSpec, metadata: Mapping[str, Any]) -> None:
        name = str(metadata.get("name"))
        pattern, limit = (_DNS_LABEL, 63) if spec == resources.NAMESPACES else (_DNS_SUBDOMAIN, 253)
        problems = []
        if len(name) > limit or not pattern.match(name):
            problems.append(
                f"metadata.name: Invalid value: {name!r}: must be a lowercase RFC 1123 "
                f"{'label' if limit == 63 else 'subdomain'} of at most {limit} characters"
            )
        for key, value in (metadata.get("labels") or {}).items():
            prefix, _, label_name = str(key).rpartition("/")
            if len(label_name) > 63 or not _LABEL_NAME.match(label_name) or len(prefix) > 253:
                problems.append(f"metadata.labels: Invalid value: {key!r}: not a valid label key")
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                problems.append(
                    f"metadata.labels: Invalid value: {value!r}: a label value must be 63 "
                    "characters or less, alphanumeric, '-', '_' or '.'"
                )
        for key, value in (metadata.get("annotations") or {}).items():
            if not isinstance(value, str):
                problems.append(f"metadata.annotations: Invalid value: {key!r}: not a string")
        if problems:
            raise failures.invalid(
                plural=spec.plural,
                group=spec.group,
                name=name,
                message=f'{spec.kind} "{name}" is invalid: ' + ", ".join(problems),
            )

    def _prepare(self, spec: resources.ResourceSpec, body: Body, *, created: bool) -> None:
        """Kind-specific server behaviour on every write (defaults, conversions, status)."""
        if spec.group == "" and spec.plural in ("configmaps", "secrets"):
            for field in ("data", "stringData"):
                values = body.get(field) or {}
                if not isinstance(values, dict) or not all(
                    isinstance(v, str) for v in values.values()
                ):
                    raise failures.bad_request(f"{spec.kind}.{field} values must be strings")
        if spec.group == "" and spec.plural == "secrets" and body.get("stringData"):
            data = body.setdefault("data", {})
            for key, value in body.pop("stringData").items():
                data[key] = base64.b64encode(value.encode()).decode()
        if created and spec == resources.NAMESPACES:
            body["status"] = {"phase": "Active"}
        if created and spec.group == "" and spec.plural == "pods":
            body["status"] = {"phase": "Pending"}
        if spec.schema is not None:
            schemas.apply_defaults(body, spec.schema)
            schemas.prune(body, spec.schema)

    def _update(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        new: Body,
        subresource: str | None,
    ) -> Body:
        if subresource not in (None, "status") or (
            subresource == "status" and not spec.status_subresource
        ):
            raise failures.no_such_path(f"{spec.plural}/{name}/{subresource}")
        old = self._stored(spec, namespace, name)
        new = copy.deepcopy(new)
        new_meta = new.setdefault("metadata", {})
        if not isinstance(new_meta, dict):
            raise failures.bad_request("metadata must be an object")
        wanted_version = new_meta.get("resourceVersion")
        if wanted_version is not None and str(wanted_version) != old["metadata"]["resourceVersion"]:
            raise failures.conflict(plural=spec.plural, group=spec.group, name=name)

        if subresource == "status":
            # Only status changes through /status; everything else stays as it was.
            status = new.get("status")
            new = copy.deepcopy(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        else:
            if spec.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            old_meta = old["metadata"]
            for key in ("name", "namespace", "uid", "creationTimestamp", "generation"):
                if key in old_meta:
                    new_meta[key] = old_meta[key]
                else:
                    new_meta.pop(key, None)
            # deletionTimestamp cannot be set or cleared by an update.
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                if key in old_meta:
                    new_meta[key] = old_meta[key]
                else:
                    new_meta.pop(key, None)
            self._validate_metadata(spec, new_meta)
            self._prepare(spec, new, created=False)

        new["apiVersion"] = spec.api_version
        new["kind"] = spec.kind
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            return self.render(spec, old)  # a no-op write changes nothing, not even the version

        if spec.generation and _content(new, without_status=spec.status_subresource) != _content(
            old, without_status=spec.status_subresource
        ):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 0)) + 1
        new["metadata"]["resourceVersion"] = self._next_version()
        if spec.storage_key == resources.CRDS.storage_key:
            self._register_crd(new)
        self._objects[spec.storage_key][(self._ns(spec, namespace), name)] = new
        self._emit("MODIFIED", spec, new, old)

        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(spec, new, cascade=True)
        return self.render(spec, new)

    def _delete(self, spec: resources.ResourceSpec, current: Body, *, cascade: bool) -> Body:
        meta = current["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return self.render(spec, current)  # already being deleted
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = _timestamp(self._clock())
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked["metadata"]["resourceVersion"] = self._next_version()
            ns = self._ns(spec, meta.get("namespace"))
            self._objects[spec.storage_key][(ns, meta["name"])] = marked
            self._emit("MODIFIED", spec, marked, current)
            if spec == resources.NAMESPACES:
                self._empty_namespace(meta["name"])
            return self.render(spec, marked)
        return self._remove(spec, current, cascade=cascade)

    def _remove(self, spec: resources.ResourceSpec, current: Body, *, cascade: bool) -> Body:
        meta = current["metadata"]
        ns = self._ns(spec, meta.get("namespace"))
        del self._objects[spec.storage_key][(ns, meta["name"])]
        gone = copy.deepcopy(current)
        gone["metadata"]["resourceVersion"] = self._next_version()
        self._emit("DELETED", spec, gone, current)
        if spec == resources.NAMESPACES:
            self._empty_namespace(meta["name"])
        if spec.storage_key == resources.CRDS.storage_key:
            self._unregister_crd(gone)
        if cascade:
            self._collect_dependents(meta["uid"])
        return self.render(spec, gone)

    def _specs_by_storage(self) -> dict[tuple[str, str], resources.ResourceSpec]:
        by_key: dict[tuple[str, str], resources.ResourceSpec] = {}
        for spec in self.resources.values():
            by_key.setdefault(spec.storage_key, spec)
        return by_key

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background cascading deletion: objects owned by a deleted object go too."""
        specs = self._specs_by_storage()
        for storage_key, objects in list(self._objects.items()):
            spec = specs.get(storage_key)
            if spec is None:
                continue
            for body in list(objects.values()):
                owners = body["metadata"].get("ownerReferences") or []
                if any(owner.get("uid") == owner_uid for owner in owners):
                    logger.debug("collecting %s %s", spec.plural, body["metadata"]["name"])
                    latest = objects.get(
                        (
                            self._ns(spec, body["metadata"].get("namespace")),
                            body["metadata"]["name"],
                        )
                    )
                    if latest is not None:
                        self._delete(spec, latest, cascade=True)

    def _empty_namespace(self, namespace: str) -> None:
        """Deleting a namespace deletes what is in it (finalizers are still honoured)."""
        for spec in self._specs_by_storage().values():
            if not spec.namespaced:
                continue
            objects = self._objects[spec.storage_key]
            for ns, name in list(objects):
                if ns == namespace and (ns, name) in objects:
                    self._delete(spec, objects[(ns, name)], cascade=True)

    def _register_crd(self, crd: Body) -> None:
        try:
            served = resources.from_crd(crd)
        except ValueError as e:
            raise failures.invalid(
                plural=resources.CRDS.plural,
                group=resources.CRDS.group,
                name=crd["metadata"].get("name"),
                message=str(e),
            ) from e
        spec = crd["spec"]
        storage_key = (spec["group"], spec["names"]["plural"])
        for key in [k for k, r in self.resources.items() if r.storage_key == storage_key]:
            del self.resources[key]
        for resource in served:
            self.resources[(resource.group, resource.version, resource.plural)] = resource
        names = spec["names"]
        stored_versions = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
        now = _timestamp(self._clock())
        status = crd.setdefault("status", {})
        status["acceptedNames"] = copy.deepcopy(names)
        status["storedVersions"] = stored_versions
        status["conditions"] = [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ]  # fmt: skip

    def _unregister_crd(self, crd: Body) -> None:
        spec = crd.get("spec") or {}
        storage_key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        served = {k: r for k, r in self.resources.items() if r.storage_key == storage_key}
        any_spec = next(iter(served.values()), None)
        if any_spec is not None:
            for body in list(self._objects[storage_key].values()):
                self._remove(any_spec, body, cascade=True)
        for key in served:
            del self.resources[key]
        self._objects.pop(storage_key, None)

    def install_crds(self, crds: Iterable[Mapping[str, Any]]) -> None:
        """Create (or replace) CRDs as ``kubectl apply`` of the files would."""
        for crd in crds:
            name = (crd.get("metadata") or {}).get("name")
            if name and ("", name) in self._objects[resources.CRDS.storage_key]:
                body = copy.deepcopy(dict(crd))
                body.get("metadata", {}).pop("resourceVersion", None)
                self.replace(resources.CRDS, namespace=None, name=name, body=body)
            else:
                self.create(resources.CRDS, namespace=None, body=dict(crd))
