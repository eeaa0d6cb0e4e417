"""What the API server does to a body before it is stored: patches, names, metadata, defaults.

Pure rules, no state: the object store (`storage`) calls them on every create and update, so
that the store itself is only about keeping objects and ordering changes.
"""

from __future__ import annotations

import base64
import copy
import datetime
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from eventhub_balancer_devstack.kube import failures, patching, resources, schemas, validating

Body = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]

#: The alphabet of generateName suffixes: the API server's, without vowels and look-alikes.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


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
    if spec.group == "" and spec.plural in ("configmaps", "secrets"):
        for field in ("data", "stringData"):
            values = body.get(field) or {}
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                raise failures.bad_request(f"{spec.kind}.{field} values must be strings")
    if spec.group == "" and spec.plural == "secrets" and body.get("stringData"):
        data = body.setdefault("data", {})
        for key, value in body.pop("stringData").items():
            data[key] = base64.b64encode(value.encode()).decode()
    if created and spec == resources.NAMESPACES:
        body["status"] = {"phase": "Active"}
    if created and spec.group == "" and spec.plural == "pods":
        body["status"] = {"phase": "Pending"}
    conform(spec, body, old=old)


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
        prepare(spec, new, created=False, old=old)
    return new


def apply_patch(
    spec: resources.ResourceSpec, current: Body, patch: Any, patch_type: PatchType, *, name: str
) -> Body:
    """The object a patch asks for; 422 if the patch is malformed or its test fails."""
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
    return new
