"""Defaulting and pruning of custom resources by their CRD's structural OpenAPI v3 schema.

A real API server fills in ``default`` values and drops fields the schema does not know (unless
``x-kubernetes-preserve-unknown-fields``) on every write; an operator tested without that would
pass against the local server and fail in a cluster (e.g. a status field silently dropped).
Validation of types, bounds and ``required`` is not done here. Pure, in place on a body.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

#: Root fields the API server never prunes or defaults by the schema.
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


def apply_defaults(body: dict[str, Any], schema: Mapping[str, Any]) -> None:
    """Fill in the schema's ``default`` values where fields are absent or null without being
    nullable (recursively)."""
    _default(body, schema, root=True)


def _default(value: Any, schema: Mapping[str, Any], *, root: bool = False) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if root and key in _ROOT_FIELDS:
                continue
            if isinstance(sub, Mapping) and "default" in sub and _absent(value.get(key), sub):
                value[key] = copy.deepcopy(sub["default"])
            if key in value and isinstance(sub, Mapping):
                _default(value[key], sub)
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key, item in value.items():
                if key not in properties:
                    _default(item, additional)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _default(item, items)


def _absent(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether a field's value counts as absent: missing, or a null its schema does not allow."""
    return value is None and not schema.get("nullable")


def prune(body: dict[str, Any], schema: Mapping[str, Any]) -> None:
    """Drop the fields that the schema does not declare (recursively), and the nulls of fields
    that are neither nullable nor defaulted (a YAML key left empty), as a real server does
    before it defaults: such a null is absent, for ``required`` too."""
    _prune(body, schema, root=True)


def _prune(value: Any, schema: Mapping[str, Any], *, root: bool = False) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keeps_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or bool(additional)
        for key in list(value):
            if root and key in _ROOT_FIELDS:
                continue
            sub = properties.get(key)
            if not isinstance(sub, Mapping) and isinstance(additional, Mapping):
                sub = additional
            if isinstance(sub, Mapping):
                if value[key] is None and not sub.get("nullable") and "default" not in sub:
                    del value[key]  # a null the schema does not allow: as if absent
                else:
                    _prune(value[key], sub)
            elif not keeps_unknown:
                del value[key]
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _prune(item, items)


def unknown_fields(body: Any, schema: Mapping[str, Any]) -> list[str]:
    """The paths pruning would drop (``spec.foo``), for ``fieldValidation=Strict``.

    Null values are skipped: in a merge patch they delete a field, they do not set one.
    """
    found: list[str] = []
    _unknown(body, schema, "", found, root=True)
    return found


def _unknown(
    value: Any, schema: Mapping[str, Any], path: str, found: list[str], *, root: bool = False
) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keeps_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or bool(additional)
        for key, item in value.items():
            if (root and key in _ROOT_FIELDS) or item is None:
                continue
            field = f"{path}.{key}" if path else key
            sub = properties.get(key)
            if isinstance(sub, Mapping):
                _unknown(item, sub, field, found)
            elif isinstance(additional, Mapping):
                _unknown(item, additional, field, found)
            elif not keeps_unknown:
                found.append(field)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _unknown(item, items, f"{path}[{index}]", found)
