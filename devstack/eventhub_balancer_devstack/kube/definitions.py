"""CustomResourceDefinitions in the local API server: a stored CRD becomes served resources.

Kept apart from the object store (`storage`), which calls `register` whenever a CRD is
written and `unregister` when one is deleted, so that the store stays about objects in
general and this about the one kind of object that changes what the server serves.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from eventhub_balancer_devstack.kube import failures, resources, validating

Body = dict[str, Any]
ObjectKey = tuple[str, str]  # (namespace or "", name)


#: What a CRD's schema may say of ``metadata`` besides ``type: object``: a default, and
#: properties for ``name`` and ``generateName`` only (apiextensions'
#: validateStructuralMetadataInvariants); the server validates metadata itself.
_METADATA_ALLOWED = frozenset({"type", "default", "properties"})
_METADATA_PROPERTIES = frozenset({"name", "generateName"})


def metadata_schema_causes(crd: Body) -> list[validating.Cause]:
    """What a real API server says of the ``metadata`` schemas of a CRD's versions."""
    spec = crd.get("spec") or {}
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    schemas = [(v.get("schema") or {}).get("openAPIV3Schema") for v in versions]
    causes: list[validating.Cause] = []
    for index, schema in enumerate(schemas):
        if not isinstance(schema, dict):
            continue
        metadata = (schema.get("properties") or {}).get("metadata")
        if not isinstance(metadata, dict):
            continue
        # The server checks one schema for all versions when they are all the same, under
        # the field name it has kept for that since apiextensions/v1beta1.
        if all(other == schemas[0] for other in schemas):
            if index:
                break
            where = "spec.validation.openAPIV3Schema.properties[metadata]"
        else:
            where = f"spec.versions[{index}].schema.openAPIV3Schema.properties[metadata]"
        kind = metadata.get("type")
        if kind is not None and kind != "object":
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {json.dumps(kind)}: must be object",
                    "field": f"{where}.type",
                }
            )
        properties = metadata.get("properties")
        if set(metadata) - _METADATA_ALLOWED or (
            properties is not None and (not properties or set(properties) - _METADATA_PROPERTIES)
        ):
            causes.append(
                {
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: must not specify anything other than name and "
                    "generateName, but metadata is implicitly specified",
                    "field": where,
                }
            )
    return causes


def register(
    served_resources: dict[tuple[str, str, str], resources.ResourceSpec], crd: Body, *, now: str
) -> None:
    """Serve a CRD's versions (replacing what it served before) and mark it established."""
    causes = metadata_schema_causes(crd)
    if causes:
        raise failures.invalid_fields(
            kind=resources.CRDS.kind,
            group=resources.CRDS.group,
            name=crd["metadata"].get("name"),
            causes=list(causes),
            message=validating.summary(causes),
        )
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
    for key in [k for k, r in served_resources.items() if r.storage_key == storage_key]:
        del served_resources[key]
    for resource in served:
        served_resources[(resource.group, resource.version, resource.plural)] = resource
    names = spec["names"]
    stored_versions = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    status = crd.setdefault("status", {})
    status["acceptedNames"] = copy.deepcopy(names)
    status["storedVersions"] = stored_versions
    status["conditions"] = [
        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
         "message": "no conflicts found", "lastTransitionTime": now},
        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
         "message": "the initial names have been accepted", "lastTransitionTime": now},
    ]  # fmt: skip


def unregister(
    crd: Body,
    *,
    served_resources: dict[tuple[str, str, str], resources.ResourceSpec],
    objects: dict[tuple[str, str], dict[ObjectKey, Body]],
    remove: Callable[[resources.ResourceSpec, Body], object],
) -> None:
    """A deleted CRD takes its objects with it (``remove`` each), then stops being served."""
    spec = crd.get("spec") or {}
    storage_key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
    served = {k: r for k, r in served_resources.items() if r.storage_key == storage_key}
    any_spec = next(iter(served.values()), None)
    if any_spec is not None:
        for body in list(objects[storage_key].values()):
            remove(any_spec, body)
    for key in served:
        del served_resources[key]
    objects.pop(storage_key, None)
