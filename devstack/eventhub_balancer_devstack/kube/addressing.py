"""Kubernetes API paths, parsed the way the API server routes them.

kmock 0.8's own parser fails on ``/api/v1/namespaces`` (it expects a namespace name after the
word ``namespaces``) and reads ``/api/v1/namespaces/NAME`` as a namespace without a resource,
so the local server parses paths itself. Pure.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class Address:
    """Where a request points: discovery (no plural) or a resource, maybe an object in it."""

    group: str
    version: str | None = None
    plural: str | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


#: Subresources of a namespace object, as opposed to resources inside a namespace.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def parse(path: str) -> Address | None:
    """The address of an API path, or None for paths outside ``/api`` and ``/apis``."""
    parts = [part for part in path.strip("/").split("/") if part]
    if not parts:
        return None
    if parts[0] == "api":
        group = ""
        rest = parts[1:]
    elif parts[0] == "apis":
        if len(parts) == 1:
            return Address(group="")  # /apis itself: the group list
        group = parts[1]
        rest = parts[2:]
    else:
        return None
    if not rest:
        return Address(group=group)
    version, *rest = rest
    if not rest:
        return Address(group=group, version=version)

    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in _NAMESPACE_SUBRESOURCES:
        # /namespaces/NS/PLURAL[/NAME[/SUB]]: a resource inside a namespace.
        namespace = rest[1]
        rest = rest[2:]
    plural, *rest = rest
    name = rest[0] if rest else None
    subresource = "/".join(rest[1:]) or None
    return Address(
        group=group,
        version=version,
        plural=plural,
        namespace=namespace,
        name=name,
        subresource=subresource,
    )
