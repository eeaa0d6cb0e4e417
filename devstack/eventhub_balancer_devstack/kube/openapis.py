"""The ``/openapi/v2`` and ``/openapi/v3`` documents of the local API server.

``kubectl apply`` asks the server's OpenAPI whether it validates fields itself (a
``fieldValidation`` query parameter on each kind's PATCH) before it sends anything, and
``kubectl explain`` reads the schemas; without them kubectl stops at "failed to download
openapi". Built-in kinds get a permissive schema (the server holds only what the project
uses), custom resources their CRD's ``openAPIV3Schema`` with ``apiVersion``, ``kind`` and
``metadata`` as a real server publishes them for every kind, whatever the CRD says of them
(``metadata`` an ObjectMeta, which, as the built-in kinds, takes any field here). Pure:
resource specs in, documents out.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from eventhub_balancer_devstack.kube import resources

#: What the documents say they describe (the version matches /version).
_INFO = {"title": "Kubernetes", "version": "v1.33.0"}

#: A built-in kind's schema: anything goes, as the server holds these kinds as plain JSON.
_BUILTIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}

#: Query parameters of writes; kubectl looks for fieldValidation on each kind's PATCH.
_WRITE_PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for name in ("dryRun", "fieldManager", "fieldValidation")
]


_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"

#: An ObjectMeta's reference, as a real server's documents name it.
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

#: The root fields of every custom resource, in a real server's words.
_ROOT_FIELDS: dict[str, Any] = {
    "apiVersion": {
        "description": "APIVersion defines the versioned schema of this representation of an "
        "object. Servers should convert recognized schemas to the latest internal value, and "
        f"may reject unrecognized values. More info: {_CONVENTIONS}#resources",
        "type": "string",
    },
    "kind": {
        "description": "Kind is a string value representing the REST resource this object "
        "represents. Servers may infer this from the endpoint the client submits requests to. "
        f"Cannot be updated. In CamelCase. More info: {_CONVENTIONS}#types-kinds",
        "type": "string",
    },
}

_OBJECT_META_SCHEMA: dict[str, Any] = {
    "description": "ObjectMeta is metadata that all persisted resources must have, which "
    "includes all objects users must create.",
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
}


def _root_fields(ref: str) -> dict[str, Any]:
    metadata = {
        "description": f"Standard object's metadata. More info: {_CONVENTIONS}#metadata",
        "allOf": [{"$ref": ref}],
    }
    return {**copy.deepcopy(_ROOT_FIELDS), "metadata": metadata}


def group_version_path(spec: resources.ResourceSpec) -> str:
    """``api/v1`` or ``apis/GROUP/VERSION``: the key of a group version in /openapi/v3."""
    return f"apis/{spec.group}/{spec.version}" if spec.group else f"api/{spec.version}"


def definition_name(spec: resources.ResourceSpec) -> str:
    """The schema's name as the API server forms it: the group's labels reversed."""
    if not spec.group:
        return f"io.k8s.api.core.{spec.version}.{spec.kind}"
    reversed_group = ".".join(reversed(spec.group.split(".")))
    return f"{reversed_group}.{spec.version}.{spec.kind}"


def _schema(spec: resources.ResourceSpec, object_meta: str) -> dict[str, Any]:
    """A kind's schema; ``object_meta`` the reference to ObjectMeta in its document."""
    if spec.schema is not None:
        schema = copy.deepcopy(dict(spec.schema))
        schema["properties"] = {**(schema.get("properties") or {}), **_root_fields(object_meta)}
    else:
        schema = copy.deepcopy(_BUILTIN_SCHEMA)
    schema["x-kubernetes-group-version-kind"] = [
        {"group": spec.group, "version": spec.version, "kind": spec.kind}
    ]
    return schema


def _gvk(spec: resources.ResourceSpec) -> dict[str, str]:
    return {"group": spec.group, "version": spec.version, "kind": spec.kind}


def _operation(
    spec: resources.ResourceSpec, verb: str, ref: str, *, write: bool, content: str | None = None
) -> dict[str, Any]:
    response = {"content": {"application/json": {"schema": {"$ref": ref}}}, "description": "OK"}
    operation: dict[str, Any] = {
        "operationId": f"{verb}{spec.kind}",
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": _gvk(spec),
        "responses": {"200": response},
        "parameters": list(_WRITE_PARAMETERS) if write else [],
    }
    if content is not None:
        operation["requestBody"] = {
            "content": {content: {"schema": {"$ref": ref}}},
            "required": True,
        }
    return operation


def _paths(spec: resources.ResourceSpec, ref: str) -> dict[str, Any]:
    prefix = f"/{group_version_path(spec)}"
    scope = f"{prefix}/namespaces/{{namespace}}" if spec.namespaced else prefix
    collection = f"{scope}/{spec.plural}"
    patch_type = "application/merge-patch+json"
    return {
        collection: {
            "get": _operation(spec, "list", ref, write=False),
            "post": _operation(spec, "post", ref, write=True, content="application/json"),
        },
        f"{collection}/{{name}}": {
            "get": _operation(spec, "get", ref, write=False),
            "put": _operation(spec, "put", ref, write=True, content="application/json"),
            "patch": _operation(spec, "patch", ref, write=True, content=patch_type),
            "delete": _operation(spec, "delete", ref, write=False),
        },
    }


def v3_document(specs: Iterable[resources.ResourceSpec]) -> dict[str, Any]:
    """The OpenAPI 3.0 document of one group version's kinds."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for spec in specs:
        name = definition_name(spec)
        schemas[name] = _schema(spec, f"#/components/schemas/{OBJECT_META}")
        if spec.schema is not None:
            schemas[OBJECT_META] = copy.deepcopy(_OBJECT_META_SCHEMA)
        paths.update(_paths(spec, f"#/components/schemas/{name}"))
    return {
        "openapi": "3.0.0",
        "info": dict(_INFO),
        "paths": paths,
        "components": {"schemas": schemas},
    }


def v3_index(documents: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``/openapi/v3``: each group version with a hash that changes with its document."""
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(document)}"}
            for path, document in sorted(documents.items())
        }
    }


def _hash(document: Mapping[str, Any]) -> str:
    text = json.dumps(document, sort_keys=True).encode()
    return hashlib.sha512(text).hexdigest()[:64].upper()


def v2_document(specs: Iterable[resources.ResourceSpec]) -> dict[str, Any]:
    """The Swagger 2.0 document of every kind (``/openapi/v2``, JSON only)."""
    definitions: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for spec in specs:
        name = definition_name(spec)
        definitions[name] = _schema(spec, f"#/definitions/{OBJECT_META}")
        if spec.schema is not None:
            definitions[OBJECT_META] = copy.deepcopy(_OBJECT_META_SCHEMA)
        for path, operations in _paths(spec, f"#/definitions/{name}").items():
            paths[path] = {
                verb: {
                    key: value
                    for key, value in operation.items()
                    if key not in ("requestBody", "responses", "parameters")
                }
                | {"responses": {"200": {"description": "OK"}}}
                for verb, operation in operations.items()
            }
    return {"swagger": "2.0", "info": dict(_INFO), "paths": paths, "definitions": definitions}
