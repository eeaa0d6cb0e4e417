"""The fields a built-in kind has, at its top level and in its ``metadata``.

A real API server decodes a built-in object into its Go type: a field the type lacks is dropped
(a warning), or refused with 400 under ``fieldValidation=Strict``, kubectl's default. Custom
resources get the same from their CRD's schema (`schemas`); built-in kinds have no schema here,
so this table stands in for their types, as far as their top level and their metadata go (a
typo in a pod's container is not caught). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from eventhub_balancer_devstack.kube import resources

#: ``ObjectMeta``'s fields (apimachinery's meta/v1 types).
METADATA_FIELDS: Final = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
        "annotations", "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip

_SPEC_AND_STATUS = frozenset({"spec", "status"})

#: Each built-in kind's top-level fields besides apiVersion, kind and metadata (k8s.io/api).
TOP_LEVEL_FIELDS: Final[Mapping[tuple[str, str], frozenset[str]]] = {
    ("", "namespaces"): _SPEC_AND_STATUS,
    ("", "pods"): _SPEC_AND_STATUS,
    ("", "configmaps"): frozenset({"data", "binaryData", "immutable"}),
    ("", "secrets"): frozenset({"data", "stringData", "type", "immutable"}),
    ("", "events"): frozenset(
        {
            "involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp",
            "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
            "reportingInstance",
        }
    ),
    ("", "serviceaccounts"): frozenset(
        {"secrets", "imagePullSecrets", "automountServiceAccountToken"}
    ),
    ("events.k8s.io", "events"): frozenset(
        {
            "eventTime", "series", "reportingController", "reportingInstance", "action",
            "reason", "regarding", "related", "note", "type", "deprecatedSource",
            "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount",
        }
    ),
    ("apps", "deployments"): _SPEC_AND_STATUS,
    ("policy", "poddisruptionbudgets"): _SPEC_AND_STATUS,
    ("networking.k8s.io", "networkpolicies"): frozenset({"spec"}),
    ("rbac.authorization.k8s.io", "roles"): frozenset({"rules"}),
    ("rbac.authorization.k8s.io", "rolebindings"): frozenset({"subjects", "roleRef"}),
    ("coordination.k8s.io", "leases"): frozenset({"spec"}),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): _SPEC_AND_STATUS,
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): frozenset({"spec"}),
    ("apiextensions.k8s.io", "customresourcedefinitions"): _SPEC_AND_STATUS,
}  # fmt: skip

_ROOT = frozenset({"apiVersion", "kind", "metadata"})


def unknown(spec: resources.ResourceSpec, body: Any, *, skip_null: bool = True) -> list[str]:
    """The fields of ``body`` its built-in kind lacks (``dta``, ``metadata.nmae``); empty for
    custom resources and for kinds this table does not know. Null values are skipped unless
    ``skip_null`` is false: in a merge patch they delete a field, they do not set one."""
    known = TOP_LEVEL_FIELDS.get((spec.group, spec.plural))
    if spec.custom or known is None or not isinstance(body, Mapping):
        return []

    def counts(value: Any) -> bool:
        return value is not None or not skip_null

    found = [k for k, v in body.items() if k not in _ROOT | known and counts(v)]
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        found += [
            f"metadata.{k}" for k, v in metadata.items() if k not in METADATA_FIELDS and counts(v)
        ]
    return found


def prune(spec: resources.ResourceSpec, body: dict[str, Any]) -> None:
    """Drop what `unknown` names, as decoding into the kind's type does."""
    for field in unknown(spec, body, skip_null=False):
        if field.startswith("metadata."):
            body["metadata"].pop(field.removeprefix("metadata."), None)
        else:
            body.pop(field, None)
