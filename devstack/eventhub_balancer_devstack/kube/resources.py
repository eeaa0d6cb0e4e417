"""The resource kinds the local API server serves: built-ins, kopf's peerings and CRDs.

Built-ins are the few kinds the operator, the consumer runtime and kopf use. Custom resources
come from CustomResourceDefinitions, loaded from ``crds/*.yaml`` at start-up or created through
the API at run time, exactly as a real cluster learns them; kopf's peering CRDs are installed
by default so that kopf can run with peering as it would in a cluster prepared by its docs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

#: The verbs announced in discovery for every resource (the server implements all of them).
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceSpec:
    """One served resource in one group version, with what the server needs to know about it."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: ``status`` makes the main endpoint ignore status and ``/status`` change only status.
    status_subresource: bool = False
    #: Kinds whose ``metadata.generation`` counts spec changes (not ConfigMaps, Secrets...).
    generation: bool = False
    #: Real clients expect the deleted object back for these, a ``Status`` for the others.
    delete_returns_object: bool = False
    #: Served from a CustomResourceDefinition (not built in).
    custom: bool = False
    #: A PUT may leave out ``metadata.resourceVersion`` (most built-in kinds); for the others
    #: (custom resources, CRDs, PodDisruptionBudgets) the real server demands it (422).
    unconditional_update: bool = True
    #: A CRD version's OpenAPI v3 schema: defaulting, pruning, validation; None for built-ins.
    schema: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)
    #: A CRD version's ``additionalPrinterColumns``, for Table responses (``kubectl get``).
    printer_columns: tuple[Mapping[str, Any], ...] = dataclasses.field(default=(), compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        """Objects are stored once per group and plural, whichever version serves them."""
        return (self.group, self.plural)


def _builtin(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool,
    short_names: tuple[str, ...] = (),
    status: bool = False,
    generation: bool = False,
    returns_object: bool = False,
    unconditional_update: bool = True,
) -> ResourceSpec:
    return ResourceSpec(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=short_names,
        status_subresource=status,
        generation=generation,
        delete_returns_object=returns_object,
        unconditional_update=unconditional_update,
    )


BUILTINS: tuple[ResourceSpec, ...] = (
    _builtin(
        "", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",), status=True,
        returns_object=True,
    ),
    _builtin(
        "", "v1", "pods", "Pod", namespaced=True, short_names=("po",), status=True,
        generation=True, returns_object=True,
    ),
    _builtin("", "v1", "configmaps", "ConfigMap", namespaced=True, short_names=("cm",)),
    _builtin("", "v1", "secrets", "Secret", namespaced=True),
    _builtin("", "v1", "events", "Event", namespaced=True, short_names=("ev",)),
    _builtin("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True, short_names=("sa",)),
    _builtin("events.k8s.io", "v1", "events", "Event", namespaced=True, short_names=("ev",)),
    # What a consumer chart's release holds (``kubectl apply`` of its rendering); the local
    # kubelet runs a Deployment's pods (``deployments.py``), the others are only stored (a
    # NetworkPolicy too: nothing here enforces it).
    _builtin(
        "apps", "v1", "deployments", "Deployment", namespaced=True, short_names=("deploy",),
        status=True, generation=True, returns_object=True,
    ),
    _builtin(
        "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True,
        short_names=("pdb",), status=True, generation=True, returns_object=True,
        unconditional_update=False,
    ),
    _builtin(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", namespaced=True,
        short_names=("netpol",), generation=True, returns_object=True,
    ),
    _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role", namespaced=True),
    _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", namespaced=True),
    _builtin("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    _builtin(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy", namespaced=False, status=True, generation=True,
        returns_object=True,
    ),
    _builtin(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding", namespaced=False, generation=True,
        returns_object=True,
    ),
    _builtin(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        namespaced=False, short_names=("crd", "crds"), status=True, generation=True,
        returns_object=True, unconditional_update=False,
    ),
)  # fmt: skip

CRDS = next(r for r in BUILTINS if r.plural == "customresourcedefinitions")
NAMESPACES = next(r for r in BUILTINS if r.plural == "namespaces")
SERVICE_ACCOUNTS = next(r for r in BUILTINS if r.plural == "serviceaccounts")
POLICIES = next(r for r in BUILTINS if r.plural == "validatingadmissionpolicies")
POLICY_BINDINGS = next(r for r in BUILTINS if r.plural == "validatingadmissionpolicybindings")


def _peering_crd(*, plural: str, kind: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


#: kopf's peering CRDs, as kopf's documentation installs them (peering.yaml).
KOPF_PEERING_CRDS: tuple[dict[str, Any], ...] = (
    _peering_crd(plural="kopfpeerings", kind="KopfPeering", scope="Namespaced"),
    _peering_crd(plural="clusterkopfpeerings", kind="ClusterKopfPeering", scope="Cluster"),
)


def from_crd(crd: Mapping[str, Any]) -> list[ResourceSpec]:
    """The served resources of a CRD body: one per served version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group")
    plural = names.get("plural")
    kind = names.get("kind")
    if not group or not plural or not kind:
        raise ValueError("a CRD needs spec.group, spec.names.plural and spec.names.kind")
    resources = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        resources.append(
            ResourceSpec(
                group=group,
                version=version["name"],
                plural=plural,
                kind=kind,
                singular=names.get("singular") or kind.lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status_subresource="status" in (version.get("subresources") or {}),
                generation=True,
                delete_returns_object=True,
                custom=True,
                unconditional_update=False,
                schema=schema,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return resources


#: libyaml's parser with the safe loader's types, where PyYAML was built with it: the same
#: documents as ``yaml.safe_load_all``, and the CRD takes 9 ms instead of 88 ms at each start.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_crd_files(directory: Path) -> Iterator[dict[str, Any]]:
    """Every CustomResourceDefinition document in the ``*.yaml``/``*.yml`` files of a directory."""
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=YAML_LOADER):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                yield document
