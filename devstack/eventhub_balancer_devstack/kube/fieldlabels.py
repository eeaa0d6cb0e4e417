"""The fields a field selector may name, kind by kind, as a real API server allows them.

A real server does not select by any path: each kind has a few field labels (every kind
``metadata.name`` and ``metadata.namespace``; pods their node and phase; Secrets their type;
Events what they are about) and refuses the others with 400 Bad Request. A test or a client
that selects by another field against the local API would pass here and fail on a cluster,
so the local API refuses them too, in the same words (two wordings, by the age of the kind's
code). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from eventhub_balancer_devstack.kube import resources
from eventhub_balancer_devstack.kube import selectors as selecting

_METADATA = ("metadata.name", "metadata.namespace")

_EVENT_SUBJECT = tuple(
    f"involvedObject.{field}"
    for field in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
)

#: Kinds with field labels of their own (k8s.io/kubernetes pkg/apis/*/v1 conversions), whose
#: refusals read "field label not supported: X".
_LEGACY: Final[Mapping[tuple[str, str], frozenset[str]]] = {
    ("", "pods"): frozenset(
        {
            *_METADATA, "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
            "status.podIPs", "status.nominatedNodeName", "spec.host",
        }
    ),
    ("", "secrets"): frozenset({*_METADATA, "type"}),
    ("", "namespaces"): frozenset({"metadata.name", "status.phase"}),
    ("", "events"): frozenset(
        {*_METADATA, *_EVENT_SUBJECT, "reason", "reportingComponent", "source", "type"}
    ),
    ("events.k8s.io", "events"): frozenset(
        {
            *_METADATA, "reason", "type", "reportingController",
            *(f.replace("involvedObject.", "regarding.") for f in _EVENT_SUBJECT),
        }
    ),
}  # fmt: skip

#: Labels that a kind selects by under another name (pods' old ``spec.host``).
_ALIASES: Final[Mapping[tuple[str, str, str], str]] = {
    ("", "pods", "spec.host"): "spec.nodeName",
    # An Event's ``source`` is its source's component.
    ("", "events", "source"): "source.component",
}


class FieldLabelError(ValueError):
    """A field selector names a field its kind cannot be selected by (the server says 400)."""


def check(spec: resources.ResourceSpec, selector: selecting.Selector) -> selecting.Selector:
    """The selector as it applies to ``spec``'s objects; FieldLabelError for a field label
    the kind does not have."""
    legacy = _LEGACY.get((spec.group, spec.plural))
    fields = []
    for requirement in selector.fields:
        path = requirement.path
        if legacy is not None or spec.custom:
            if path not in (legacy or _METADATA):
                raise FieldLabelError(f"field label not supported: {path}")
        elif path not in _METADATA:
            raise FieldLabelError(
                f'"{path}" is not a known field selector: only "metadata.name", '
                '"metadata.namespace"'
            )
        alias = _ALIASES.get((spec.group, spec.plural, path))
        fields.append(
            requirement if alias is None else selecting.FieldRequirement(
                path=alias, op=requirement.op, value=requirement.value
            )
        )  # fmt: skip
    return selecting.Selector(labels=selector.labels, fields=tuple(fields))
