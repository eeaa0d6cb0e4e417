"""What the API server does to a body before it is stored: patches, names, metadata, defaults.

Pure rules, no state: the object store (`storage`) calls them on every create and update, so
that the store itself is only about keeping objects and ordering changes.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from eventhub_balancer_devstack.kube import (
    builtinfields,
    failures,
    objectmetas,
    patching,
    resources,
    schemas,
    validating,
)

Body = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]

#: The alphabet of generateName suffixes: the API server's, without vowels and look-alikes.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5

#: What a real server puts on every namespace: a label with its name, a spec finalizer.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
NAMESPACE_FINALIZER = "kubernetes"


def timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def content(body: Mapping[str, Any], *, without_status: bool) -> dict[str, Any]:
    """What ``generation`` counts: everything but metadata (and status if it is separate)."""
    skipped = {"metadata", "apiVersion", "kind"} | ({"status"} if without_status else set())
    return {k: v for k, v in body.items() if k not in skipped}


def stored_namespace(spec: resources.ResourceSpec, namespace: str | None) -> str:
    """The namespace part of an object's key: "" for cluster-scoped resources."""
    return (namespace or "") if spec.namespaced else ""


def namespace_for_write(
    spec: resources.ResourceSpec, namespace: str | None, metadata: Mapping[str, Any]
) -> str:
    if not spec.namespaced:
        return ""
    in_body = metadata.get("namespace")
    if namespace and in_body and in_body != namespace:
        raise failures.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    ns = namespace or in_body
    if not ns:
        raise failures.bad_request(f"{spec.plural} are namespaced: the URL needs a namespace")
    return str(ns)


def generate_name(prefix: str, *, taken: Callable[[str], bool]) -> str:
    """A name from ``generateName``: the prefix and a random suffix, unless all tries are taken."""
    for _ in range(100):  # collisions are rare; the bound only guards a full namespace
        suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
        name = f"{prefix[: 63 - _SUFFIX_LENGTH]}{suffix}"
        if not taken(name):
            break
    return name


def validate_metadata(spec: resources.ResourceSpec, metadata: Mapping[str, Any]) -> None:
    """422 naming each field of ``metadata`` a real API server refuses (`objectmetas`)."""
    for field in ("labels", "annotations"):
        values = metadata.get(field) or {}
        for value in values.values() if isinstance(values, Mapping) else ():
            if not isinstance(value, str):
                # A real server cannot even decode such a body into its types.
                raise failures.bad_request(
                    f'{spec.kind} in version "{spec.version}" cannot be handled as a '
                    f"{spec.kind}: json: cannot unmarshal {json_kind(value)} into Go struct "
                    f"field ObjectMeta.metadata.{field} of type string"
                )
    if spec.group == "" and spec.plural == "events":
        return  # core/v1 Events keep their legacy rules: no checks of names or labels
    if spec == resources.NAMESPACES:
        # The server labels a namespace with its name before it checks the labels.
        labels = {
            **(metadata.get("labels") or {}),
            NAMESPACE_NAME_LABEL: metadata.get("name") or "",
        }
        metadata = {**metadata, "labels": labels}
    causes = objectmetas.check(metadata, dns_label=spec == resources.NAMESPACES)
    if causes:
        raise failures.invalid_fields(
            kind=spec.kind,
            group=spec.group,
            name=str(metadata.get("name") or ""),
            causes=list(causes),
            message=validating.summary(causes),
        )


def json_kind(value: Any) -> str:
    """How Go's JSON decoder names a value of the wrong type in its errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "null"


def conform(spec: resources.ResourceSpec, body: Body, *, old: Body | None) -> None:
    """Default, prune and validate a custom resource by its schema; 422 naming each field."""
    if spec.schema is None:
        return
    schemas.apply_defaults(body, spec.schema)
    schemas.prune(body, spec.schema)
    causes = validating.validate(body, spec.schema, old=old)
    if causes:
        raise failures.invalid_fields(
            kind=spec.kind,
            group=spec.group,
            name=(body.get("metadata") or {}).get("name"),
            causes=list(causes),
            message=validating.summary(causes),
        )


def prepare(
    spec: resources.ResourceSpec, body: Body, *, created: bool, old: Body | None = None
) -> None:
    """Kind-specific server behaviour on every write (defaults, conversions, status)."""
    builtinfields.prune(spec, body)
    if spec.group == "" and spec.plural in ("configmaps", "secrets"):
        for field in ("data", "stringData"):
            values = body.get(field) or {}
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                raise failures.bad_request(f"{spec.kind}.{field} values must be strings")
    if spec.group == "" and spec.plural == "secrets":
        body.setdefault("type", "Opaque")
    if spec.group == "" and spec.plural == "secrets" and body.get("stringData"):
        data = body.setdefault("data", {})
        for key, value in body.pop("stringData").items():
            data[key] = base64.b64encode(value.encode()).decode()
    if spec == resources.NAMESPACES:
        _prepare_namespace(body, old=None if created else old)
    if created and spec.group == "" and spec.plural == "pods":
        body["status"] = {"phase": "Pending"}
    conform(spec, body, old=old)


def _prepare_namespace(body: Body, *, old: Body | None) -> None:
    """A namespace carries its name as a label (selectors pick namespaces by it) and, from
    its creation, the ``kubernetes`` finalizer in its spec, which only ``/finalize`` changes."""
    metadata = body["metadata"]
    metadata["labels"] = {**(metadata.get("labels") or {}), NAMESPACE_NAME_LABEL: metadata["name"]}
    if old is not None:
        if "spec" in old:
            body["spec"] = copy.deepcopy(old["spec"])
        else:
            body.pop("spec", None)
        return
    given = body.get("spec")
    spec: dict[str, Any] = given if isinstance(given, dict) else {}
    finalizers = list(spec.get("finalizers") or [])
    if NAMESPACE_FINALIZER not in finalizers:
        finalizers.append(NAMESPACE_FINALIZER)
    body["spec"] = {**spec, "finalizers": finalizers}
    body["status"] = {"phase": "Active"}


def admit_create(
    spec: resources.ResourceSpec, new: Body, *, namespace: str, now: datetime.datetime
) -> None:
    """Set the server-owned metadata of a new object and apply the kind's defaults."""
    metadata = new["metadata"]
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
        metadata.pop(key, None)
    if spec.namespaced:
        metadata["namespace"] = namespace
    else:
        metadata.pop("namespace", None)
    metadata["uid"] = str(uuid.uuid4())
    metadata["creationTimestamp"] = timestamp(now)
    if spec.generation:
        metadata["generation"] = 1
    else:
        metadata.pop("generation", None)
    if spec.status_subresource:
        new.pop("status", None)  # the main endpoint never sets status
    prepare(spec, new, created=True)


def admit_update(
    spec: resources.ResourceSpec, *, old: Body, new: Body, subresource: str | None
) -> Body:
    """The object an update stores: only status through /status, no server-owned field else."""
    if subresource == "status":
        # Only status changes through /status; everything else stays as it was.
        status = new.get("status")
        new = copy.deepcopy(old)
        if status is None:
            new.pop("status", None)
        else:
            new["status"] = status
        conform(spec, new, old=old)
    else:
        new_meta = new["metadata"]
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
        validate_metadata(spec, new_meta)
        _check_finalizers_while_deleting(spec, old_meta, new_meta)
        prepare(spec, new, created=False, old=old)
    return new


def _check_finalizers_while_deleting(
    spec: resources.ResourceSpec, old_meta: Mapping[str, Any], new_meta: Mapping[str, Any]
) -> None:
    """An object being deleted may lose finalizers, never gain one (it would never go)."""
    if not old_meta.get("deletionTimestamp"):
        return
    before = set(old_meta.get("finalizers") or ())
    added = [f for f in new_meta.get("finalizers") or () if f not in before]
    if not added:
        return
    shown = ", ".join(json.dumps(f) for f in added)
    cause: validating.Cause = {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: no new finalizers can be added if the object is being deleted, "
        f"found new finalizers []string{{{shown}}}",
        "field": "metadata.finalizers",
    }
    raise failures.invalid_fields(
        kind=spec.kind,
        group=spec.group,
        name=str(new_meta.get("name") or ""),
        causes=[cause],
        message=validating.summary([cause]),
    )


def check_preconditions(
    spec: resources.ResourceSpec, current: Body, preconditions: Mapping[str, Any]
) -> None:
    """A delete's ``preconditions`` (``uid``, ``resourceVersion``) hold, or 409."""
    meta = current["metadata"]
    for field in ("uid", "resourceVersion"):
        wanted = preconditions.get(field)
        if wanted is not None and wanted != meta.get(field):
            raise failures.precondition_failed(
                kind=spec.kind,
                group=spec.group,
                name=meta["name"],
                field=field,
                wanted=str(wanted),
                stored=str(meta.get(field)),
            )


def apply_patch(
    spec: resources.ResourceSpec, current: Body, patch: Any, patch_type: PatchType, *, name: str
) -> Body:
    """The object a patch asks for: 400 for a patch that is no patch, 422 for a JSON patch
    that cannot be applied (a failed ``test`` among them), as a real server answers."""
    if patch_type == "json":
        if not isinstance(patch, list):
            raise failures.bad_request(
                f"json: cannot unmarshal {json_kind(patch)} into Go value of type jsonpatch.Patch"
            )
        try:
            new = patching.apply_json_patch(current, patch)
        except patching.PatchError as e:
            raise failures.patch_unprocessable() from e
    elif not isinstance(patch, dict):
        raise failures.bad_request("Invalid JSON Patch")
    else:
        new = patching.merge(current, patch)
    if not isinstance(new, dict):
        raise failures.bad_request("the patch turned the object into a non-object")
    return new
