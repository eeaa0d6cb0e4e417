"""JSON merge patches (RFC 7386) and JSON patches (RFC 6902) applied to object bodies.

The API server accepts both; kopf sends its finalizer and status changes as JSON patches that
start with ``test /metadata/resourceVersion`` and relies on a failed ``test`` being refused, so
that op must be exact. Strategic merge patches are applied as merge patches (lists replaced,
not merged by key). Pure: bodies in, new bodies out; inputs are never modified.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any


class PatchError(ValueError):
    """The patch is malformed or points nowhere (the server answers 422 or 400)."""


class PatchTestFailed(PatchError):
    """A ``test`` operation of a JSON patch did not hold (the server answers 422)."""


def merge(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: mappings merge recursively, ``null`` deletes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer {path!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit():
        raise PatchError(f"array index {token!r} is not a number")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} is out of range")
    return index


def _parent(doc: Any, parts: Sequence[str]) -> Any:
    node = doc
    for token in parts[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path segment {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise PatchError(f"path segment {token!r} is not inside an object or array")
    return node


def _get(doc: Any, parts: Sequence[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"path segment {token!r} does not exist")
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, for_add=False)]
    raise PatchError(f"path segment {token!r} is not inside an object or array")


def _add(doc: Any, parts: Sequence[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, for_add=True), value)
    else:
        raise PatchError(f"cannot add {token!r}: the parent is not an object or array")
    return doc


def _remove(doc: Any, parts: Sequence[str]) -> Any:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"cannot remove {token!r}: it does not exist")
        del parent[token]
    elif isinstance(parent, list):
        del parent[_index(parent, token, for_add=False)]
    else:
        raise PatchError(f"cannot remove {token!r}: the parent is not an object or array")
    return doc


def apply_json_patch(target: Any, operations: Any) -> Any:
    """Apply a JSON patch (a list of operations) to a copy of ``target``."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, Mapping) or "op" not in operation or "path" not in operation:
            raise PatchError(f"malformed JSON patch operation: {operation!r}")
        op = operation["op"]
        parts = _pointer(str(operation["path"]))
        if op == "test":
            if _get(doc, parts) != operation.get("value"):
                raise PatchTestFailed(
                    f"the test operation on {operation['path']!r} failed: "
                    f"the value is not {operation.get('value')!r}"
                )
        elif op == "add":
            doc = _add(doc, parts, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            doc = _remove(doc, parts)
        elif op == "replace":
            _get(doc, parts)  # must exist
            value = copy.deepcopy(operation.get("value"))
            doc = _add(_remove(doc, parts), parts, value) if parts else value
        elif op in ("move", "copy"):
            source = _pointer(str(operation.get("from", "")))
            value = copy.deepcopy(_get(doc, source))
            if op == "move":
                doc = _remove(doc, source)
            doc = _add(doc, parts, value)
        else:
            raise PatchError(f"unknown JSON patch operation {op!r}")
    return doc
