"""Garbage collection in the local API server: what goes when its owner or namespace goes.

Kept apart from the object store (`storage`): which objects depend on which is a walk over
``ownerReferences`` and namespaces, while the store only knows how to delete one object. The
store hands its tables and its own delete in; deletions are done one by one, each as the
store would do it on request (finalizers honoured, cascading further).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from eventhub_balancer_devstack.kube import admitting, resources

logger = logging.getLogger(__name__)

Body = dict[str, Any]
ObjectKey = tuple[str, str]  # (namespace or "", name)
#: Objects of all resources: storage key (group, plural) -> object key -> stored body.
Objects = Mapping[tuple[str, str], dict[ObjectKey, Body]]
#: Delete one stored object with cascading (the store's own deletion).
Delete = Callable[[resources.ResourceSpec, Body], object]


def collect_dependents(
    owner_uid: str,
    *,
    objects: Objects,
    specs: Mapping[tuple[str, str], resources.ResourceSpec],
    delete: Delete,
) -> None:
    """Background cascading deletion: objects owned by a deleted object go too."""
    for storage_key, stored in list(objects.items()):
        spec = specs.get(storage_key)
        if spec is None:
            continue
        for body in list(stored.values()):
            owners = body["metadata"].get("ownerReferences") or []
            if any(owner.get("uid") == owner_uid for owner in owners):
                logger.debug("collecting %s %s", spec.plural, body["metadata"]["name"])
                latest = stored.get(
                    (
                        admitting.stored_namespace(spec, body["metadata"].get("namespace")),
                        body["metadata"]["name"],
                    )
                )
                if latest is not None:
                    delete(spec, latest)


def empty_namespace(
    namespace: str,
    *,
    objects: Objects,
    specs: Mapping[tuple[str, str], resources.ResourceSpec],
    delete: Delete,
) -> None:
    """Deleting a namespace deletes what is in it (finalizers are still honoured)."""
    for spec in specs.values():
        if not spec.namespaced:
            continue
        stored = objects[spec.storage_key]
        for ns, name in list(stored):
            if ns == namespace and (ns, name) in stored:
                delete(spec, stored[(ns, name)])
