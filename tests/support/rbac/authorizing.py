"""A pure RBAC evaluator over Role/ClusterRole/(Cluster)RoleBinding documents.

It answers what the API server's RBAC authorizer would (``k8s.io/kubernetes/plugin/pkg/auth/
authorizer/rbac``): a request is allowed when a rule of a role bound to the subject matches its
verb, API group, resource (``resource/subresource``, ``*/subresource``, ``*``), resource name
(no resourceNames means all), or, for non-resource requests, the URL (exact, or a prefix ending
in ``*``). A RoleBinding grants in its own namespace only, a ClusterRoleBinding everywhere.

``unexercised`` reports the grants (one verb on one resource of one binding) that no allowed
request used: what least privilege says to remove.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.support.rbac import requestinfo

#: What every authenticated subject may do: the default ``system:discovery``,
#: ``system:basic-user`` and ``system:public-info-viewer`` ClusterRoles, which kopf and the
#: kubernetes client rely on for API discovery.
DEFAULT_NON_RESOURCE_URLS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/readyz",
    "/version",
    "/version/",
    "/openapi",
    "/openapi/*",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Subject:
    """Who makes the requests: a ServiceAccount (``namespace`` set) or a User."""

    kind: str
    name: str
    namespace: str = ""

    @classmethod
    def service_account(cls, namespace: str, name: str) -> Subject:
        return cls(kind="ServiceAccount", name=name, namespace=namespace)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rule:
    """One PolicyRule, with lists made tuples."""

    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Rule:
        return cls(
            verbs=tuple(body.get("verbs") or ()),
            api_groups=tuple(body.get("apiGroups") or ()),
            resources=tuple(body.get("resources") or ()),
            resource_names=tuple(body.get("resourceNames") or ()),
            non_resource_urls=tuple(body.get("nonResourceURLs") or ()),
        )

    def allows(self, request: requestinfo.RequestInfo) -> bool:
        if "*" not in self.verbs and request.verb not in self.verbs:
            return False
        if not request.is_resource_request:
            return any(_url_matches(url, request.path) for url in self.non_resource_urls)
        if "*" not in self.api_groups and request.api_group not in self.api_groups:
            return False
        if not any(_resource_matches(r, request) for r in self.resources):
            return False
        return not self.resource_names or request.name in self.resource_names


@dataclasses.dataclass(frozen=True, kw_only=True)
class Grant:
    """One binding of a role: its rules apply in ``namespace`` ('' means cluster-wide)."""

    binding: str
    role: str
    namespace: str
    rules: tuple[Rule, ...]

    def applies_to(self, request: requestinfo.RequestInfo) -> bool:
        if not self.namespace:
            return True
        # A RoleBinding covers namespaced requests in its namespace, nothing cluster-scoped.
        return request.is_resource_request and request.namespace == self.namespace


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class Atom:
    """The smallest unit of a grant: one verb on one resource (or URL) under one binding."""

    binding: str
    namespace: str
    verb: str
    api_group: str
    resource: str
    resource_names: tuple[str, ...] = ()

    def describe(self) -> str:
        group = f".{self.api_group}" if self.api_group else ""
        where = f" in {self.namespace}" if self.namespace else " (cluster-wide)"
        names = f" {list(self.resource_names)}" if self.resource_names else ""
        return f"{self.verb} {self.resource}{group}{names}{where} via {self.binding}"


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url == "*" or rule_url == path:
        return True
    return rule_url.endswith("*") and path.startswith(rule_url[:-1])


def _resource_matches(rule_resource: str, request: requestinfo.RequestInfo) -> bool:
    if rule_resource == "*":
        return True
    combined = request.resource + (f"/{request.subresource}" if request.subresource else "")
    if rule_resource == combined:
        return True
    return bool(request.subresource) and rule_resource == f"*/{request.subresource}"


def _subject_matches(body: Mapping[str, Any], subject: Subject, binding_namespace: str) -> bool:
    if body.get("kind") != subject.kind or body.get("name") != subject.name:
        return False
    if subject.kind == "ServiceAccount":
        # A ServiceAccount subject without a namespace means the binding's own namespace.
        return (body.get("namespace") or binding_namespace) == subject.namespace
    return True


class Authorizer:
    """RBAC over a fixed set of documents (other kinds are ignored)."""

    def __init__(
        self,
        documents: Iterable[Mapping[str, Any]],
        *,
        default_non_resource_urls: Sequence[str] = DEFAULT_NON_RESOURCE_URLS,
    ) -> None:
        self.roles: dict[tuple[str, str], tuple[Rule, ...]] = {}
        self.bindings: list[Mapping[str, Any]] = []
        for doc in documents:
            kind = doc.get("kind")
            meta = doc.get("metadata") or {}
            if kind in ("Role", "ClusterRole"):
                namespace = meta.get("namespace", "") if kind == "Role" else ""
                if kind == "ClusterRole" and doc.get("aggregationRule"):
                    raise ValueError(
                        f"ClusterRole {meta.get('name')}: aggregation is not evaluated"
                    )
                rules = tuple(Rule.from_body(r) for r in doc.get("rules") or ())
                self.roles[(namespace, meta["name"])] = rules
            elif kind in ("RoleBinding", "ClusterRoleBinding"):
                self.bindings.append(doc)
        self.default_rule = Rule(verbs=("get",), non_resource_urls=tuple(default_non_resource_urls))

    def grants(self, subject: Subject) -> list[Grant]:
        """The subject's bindings with their roles' rules; a missing role is an error."""
        found = []
        for doc in self.bindings:
            meta = doc["metadata"]
            namespace = meta.get("namespace", "") if doc["kind"] == "RoleBinding" else ""
            if not any(_subject_matches(s, subject, namespace) for s in doc.get("subjects") or ()):
                continue
            ref = doc["roleRef"]
            key = (namespace, ref["name"]) if ref["kind"] == "Role" else ("", ref["name"])
            if key not in self.roles:
                raise LookupError(
                    f"{doc['kind']} {meta['name']} refers to {ref['kind']} {ref['name']}"
                    f"{' in ' + namespace if namespace else ''}, which the documents lack"
                )
            label = f"{doc['kind']} {namespace + '/' if namespace else ''}{meta['name']}"
            found.append(
                Grant(binding=label, role=ref["name"], namespace=namespace, rules=self.roles[key])
            )
        return found

    def allowed(self, subject: Subject, request: requestinfo.RequestInfo) -> bool:
        if self.default_rule.allows(request):
            return True
        return any(
            rule.allows(request)
            for grant in self.grants(subject)
            if grant.applies_to(request)
            for rule in grant.rules
        )

    def denied(
        self, subject: Subject, requests: Iterable[requestinfo.RequestInfo]
    ) -> list[requestinfo.RequestInfo]:
        """The requests RBAC would refuse (403), sorted and without repeats."""
        return sorted({r for r in requests if not self.allowed(subject, r)})

    def unexercised(
        self, subject: Subject, requests: Iterable[requestinfo.RequestInfo]
    ) -> list[Atom]:
        """The grant atoms that no request used. Wildcards always count as unexercised."""
        requests = list(requests)
        unused = set()
        for grant in self.grants(subject):
            for rule in grant.rules:
                for atom_request, atom in _atoms(grant, rule):
                    if atom_request is None or not any(
                        atom_request(r) for r in requests if grant.applies_to(r)
                    ):
                        unused.add(atom)
        return sorted(unused)


def _atoms(grant: Grant, rule: Rule) -> Iterable[tuple[Any, Atom]]:
    """Each (verb, group, resource) of a rule, with a predicate telling whether a request used it.

    A wildcard is never 'used': it grants what nobody can enumerate, so it is always reported.
    """
    if rule.non_resource_urls:
        for verb in rule.verbs:
            for url in rule.non_resource_urls:
                atom = Atom(
                    binding=grant.binding,
                    namespace=grant.namespace,
                    verb=verb,
                    api_group="",
                    resource=url,
                )
                single = Rule(verbs=(verb,), non_resource_urls=(url,))
                yield (None if "*" in (verb, url) else single.allows), atom
        return
    for verb in rule.verbs:
        for group in rule.api_groups:
            for resource in rule.resources:
                atom = Atom(
                    binding=grant.binding,
                    namespace=grant.namespace,
                    verb=verb,
                    api_group=group,
                    resource=resource,
                    resource_names=rule.resource_names,
                )
                single = Rule(
                    verbs=(verb,),
                    api_groups=(group,),
                    resources=(resource,),
                    resource_names=rule.resource_names,
                )
                wildcard = "*" in (verb, group) or resource == "*" or resource.startswith("*/")
                yield (None if wildcard else single.allows), atom
