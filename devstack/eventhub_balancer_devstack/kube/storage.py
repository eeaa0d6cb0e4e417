"""The object store of the local API server: what a real API server does on top of etcd.

It sets the server-owned metadata (``resourceVersion`` from one global counter, ``uid``,
``creationTimestamp``, ``generation``, the namespace from the URL), enforces optimistic
concurrency (409 on a stale ``resourceVersion``), the status subresource split, deletion with
finalizers and garbage collection through ``ownerReferences``, and keeps a bounded history of
changes so that watches can resume from a resource version (410 Gone once it is compacted).

The store keeps the objects and orders the changes; the rules live next to it: `admitting`
(what a write may contain and what the server sets), `histories` (the change log and the
watches), `collecting` (garbage collection), `definitions` (CRDs becoming resources). The
resource version counter, the history and the watches on it are the store's base class, in
`versioning`.

All methods are synchronous and must be called on the server's event loop only: every
operation is atomic because nothing in it awaits, which is what makes the resource versions
strictly ordered without locks.
"""

from __future__ import annotations

import collections
import copy
import datetime
import functools
from collections.abc import Callable, Mapping
from typing import Any

from eventhub_balancer_devstack.kube import (
    admitting,
    collecting,
    definitions,
    failures,
    histories,
    resources,
    versioning,
)
from eventhub_balancer_devstack.kube import selectors as selecting

Body = dict[str, Any]
ObjectKey = tuple[str, str]  # (namespace or "", name)

#: Namespaces a fresh cluster has.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_EVERYTHING = selecting.Selector()

#: Admission of one write: called with the operation, the object to store (None on DELETE) and
#: the stored one (None on CREATE) before anything changes; it raises to refuse the write.
Admit = Callable[[str, Body | None, Body | None], None]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


class Store(versioning.VersionedHistory):
    """Objects of all resources, their history, and the live watches on them."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime.datetime] = _utc_now,
        history_size: int = histories.HISTORY_SIZE,
        write_record_size: int = histories.WRITE_RECORD_SIZE,
        auto_namespaces: bool = True,
    ) -> None:
        self._clock = clock
        self._auto_namespaces = auto_namespaces
        super().__init__(history_size=history_size, write_record_size=write_record_size)
        self._objects: dict[tuple[str, str], dict[ObjectKey, Body]] = collections.defaultdict(dict)
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
            path = f"/{'apis/' + group if group else 'api'}/{version}/{plural}"
            if any(g == group and v == version for g, v, _ in self.resources):
                raise failures.no_such_path(path) from None
            raise failures.page_not_found(path) from None

    def now(self) -> datetime.datetime:
        """The store's clock (creation and deletion times are on it)."""
        return self._clock()

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

    # -- writing -----------------------------------------------------------------------------

    def create(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        body: Any,
        admit: Admit | None = None,
    ) -> Body:
        if not isinstance(body, dict):
            raise failures.bad_request("the request body must be a JSON object")
        new = copy.deepcopy(body)
        metadata = new.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise failures.bad_request("metadata must be an object")
        ns = admitting.namespace_for_write(spec, namespace, metadata)
        objects = self._objects[spec.storage_key]
        name = str(metadata.get("name") or "")
        if not name:
            prefix = str(metadata.get("generateName") or "")
            if not prefix:
                admitting.validate_metadata(spec, metadata)  # refuses it: no name at all
            name = admitting.generate_name(prefix, taken=lambda n: (ns, n) in objects)
            metadata["name"] = name
        admitting.validate_metadata(spec, metadata)
        if (ns, name) in objects:
            raise failures.already_exists(plural=spec.plural, group=spec.group, name=name)
        if spec.namespaced:
            self._ensure_namespace(ns, for_spec=spec)

        admitting.admit_create(spec, new, namespace=ns, now=self._clock())
        if admit is not None:
            admit("CREATE", new, None)
        metadata["resourceVersion"] = self._next_version()
        new["apiVersion"] = spec.api_version
        new["kind"] = spec.kind
        if spec.storage_key == resources.CRDS.storage_key:
            self._register_crd(new)  # first: a malformed CRD is refused before it is stored
        objects[(ns, name)] = new
        self._emit("ADDED", spec, new, None)
        if spec == resources.NAMESPACES:
            # What a real control plane's serviceaccount controller does at once: pods, and
            # clients that wait for it before they make any, need it.
            account = {"metadata": {"name": "default"}}
            self.create(resources.SERVICE_ACCOUNTS, namespace=name, body=account)
        return self.render(spec, new)

    def replace(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str | None = None,
        admit: Admit | None = None,
    ) -> Body:
        if not isinstance(body, dict):
            raise failures.bad_request("the request body must be a JSON object")
        metadata = body.get("metadata") or {}
        if metadata.get("name") not in (None, name):
            raise failures.bad_request(
                f"the name of the object ({metadata.get('name')}) does not match the name "
                f"on the URL ({name})"
            )
        if metadata.get("resourceVersion") in (None, "") and not spec.unconditional_update:
            raise failures.version_required(plural=spec.plural, group=spec.group, name=name)
        return self._update(
            spec, namespace=namespace, name=name, new=body, subresource=subresource, admit=admit
        )

    def patch(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: admitting.PatchType,
        subresource: str | None = None,
        admit: Admit | None = None,
    ) -> Body:
        current = self._stored(spec, namespace, name)
        new = admitting.apply_patch(spec, current, patch, patch_type, name=name)
        return self._update(
            spec, namespace=namespace, name=name, new=new, subresource=subresource, admit=admit
        )

    def delete(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
        admit: Admit | None = None,
    ) -> Body:
        """Delete now, or mark for deletion while finalizers remain; returns the last state."""
        options = options or {}
        current = self._stored(spec, namespace, name)
        admitting.check_preconditions(spec, current, options.get("preconditions") or {})
        if admit is not None:
            admit("DELETE", None, current)
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
        return admitting.stored_namespace(spec, namespace)

    def _stored(self, spec: resources.ResourceSpec, namespace: str | None, name: str) -> Body:
        body = self._objects[spec.storage_key].get((self._ns(spec, namespace), name))
        if body is None:
            raise failures.not_found(plural=spec.plural, group=spec.group, name=name)
        return body

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

    def _update(
        self,
        spec: resources.ResourceSpec,
        *,
        namespace: str | None,
        name: str,
        new: Body,
        subresource: str | None,
        admit: Admit | None = None,
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

        new = admitting.admit_update(spec, old=old, new=new, subresource=subresource)

        new["apiVersion"] = spec.api_version
        new["kind"] = spec.kind
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if admit is not None:
            admit("UPDATE", new, old)
        if new == old:
            return self.render(spec, old)  # a no-op write changes nothing, not even the version

        if spec.generation and admitting.content(
            new, without_status=spec.status_subresource
        ) != admitting.content(old, without_status=spec.status_subresource):
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
            marked["metadata"]["deletionTimestamp"] = admitting.timestamp(self._clock())
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            if spec.generation:  # a real server counts the mark as a change of the object
                marked["metadata"]["generation"] = int(meta.get("generation") or 0) + 1
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
        collecting.collect_dependents(
            owner_uid,
            objects=self._objects,
            specs=self._specs_by_storage(),
            delete=functools.partial(self._delete, cascade=True),
        )

    def _empty_namespace(self, namespace: str) -> None:
        collecting.empty_namespace(
            namespace,
            objects=self._objects,
            specs=self._specs_by_storage(),
            delete=functools.partial(self._delete, cascade=True),
        )

    def _register_crd(self, crd: Body) -> None:
        definitions.register(self.resources, crd, now=admitting.timestamp(self._clock()))
        names = crd["spec"]["names"]
        self._begin_serving((crd["spec"]["group"], names["plural"]))

    def _unregister_crd(self, crd: Body) -> None:
        spec = crd.get("spec") or {}
        self._end_serving((spec.get("group", ""), (spec.get("names") or {}).get("plural", "")))
        definitions.unregister(
            crd,
            served_resources=self.resources,
            objects=self._objects,
            remove=functools.partial(self._remove, cascade=True),
        )
