"""The RBAC evaluator with hand-written roles and requests."""

from typing import Any

import pytest

from tests.support.rbac.authorizing import Authorizer, Subject
from tests.support.rbac.requestinfo import request_info

OPERATOR = Subject.service_account("ops", "op")
OTHER = Subject.service_account("ops", "someone-else")


def role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str = "") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "rules": rules,
    }


def binding(
    kind: str, name: str, role_kind: str, role_name: str, namespace: str = ""
) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}],
    }


DOCUMENTS = [
    role(
        "ClusterRole",
        "op",
        [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["x.dev"], "resources": ["things/status"], "verbs": ["patch"]},
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get"],
                "resourceNames": ["one"],
            },
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
    ),
    binding("ClusterRoleBinding", "op", "ClusterRole", "op"),
    role("Role", "cm", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}], "shop"),
    binding("RoleBinding", "cm", "Role", "cm", "shop"),
    # A ClusterRole bound by a RoleBinding grants only in that namespace.
    role(
        "ClusterRole", "events", [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    ),
    binding("RoleBinding", "events", "ClusterRole", "events", "shop"),
]


@pytest.fixture
def rbac() -> Authorizer:
    return Authorizer(DOCUMENTS)


@pytest.mark.parametrize(
    ("method", "path", "query", "allowed"),
    [
        ("GET", "/api/v1/pods", {"watch": "true"}, True),
        ("GET", "/api/v1/namespaces/any/pods/p", {}, True),
        ("PATCH", "/api/v1/namespaces/any/pods/p", {}, False),
        ("PATCH", "/apis/x.dev/v1/namespaces/a/things/t/status", {}, True),
        ("PATCH", "/apis/x.dev/v1/namespaces/a/things/t", {}, False),
        ("PATCH", "/apis/y.dev/v1/namespaces/a/things/t/status", {}, False),
        ("GET", "/api/v1/namespaces/a/secrets/one", {}, True),
        ("GET", "/api/v1/namespaces/a/secrets/two", {}, False),
        ("GET", "/api/v1/namespaces/a/secrets", {}, False),
        ("DELETE", "/api/v1/namespaces/shop/configmaps/c", {}, True),
        ("DELETE", "/api/v1/namespaces/billing/configmaps/c", {}, False),
        ("GET", "/api/v1/configmaps", {}, False),
        ("POST", "/api/v1/namespaces/shop/events", {}, True),
        ("POST", "/api/v1/namespaces/billing/events", {}, False),
        ("GET", "/metrics", {}, True),
        ("GET", "/apis/x.dev/v1", {}, True),
        ("GET", "/version", {}, True),
        ("POST", "/version", {}, False),
    ],
)
def test_allowed(
    rbac: Authorizer, method: str, path: str, query: dict[str, str], allowed: bool
) -> None:
    assert rbac.allowed(OPERATOR, request_info(method, path, query)) is allowed


def test_other_subjects_get_only_discovery(rbac: Authorizer) -> None:
    assert not rbac.allowed(OTHER, request_info("GET", "/api/v1/pods"))
    assert rbac.allowed(OTHER, request_info("GET", "/apis"))


def test_wildcard_subresource_rule() -> None:
    docs = [
        role(
            "ClusterRole", "r", [{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]}]
        ),
        binding("ClusterRoleBinding", "r", "ClusterRole", "r"),
    ]
    rbac = Authorizer(docs)
    assert rbac.allowed(OPERATOR, request_info("GET", "/apis/a.b/v1/namespaces/n/x/y/status"))
    assert not rbac.allowed(OPERATOR, request_info("GET", "/apis/a.b/v1/namespaces/n/x/y"))


def test_a_binding_to_a_missing_role_is_an_error() -> None:
    rbac = Authorizer([binding("ClusterRoleBinding", "b", "ClusterRole", "gone")])
    with pytest.raises(LookupError, match="gone"):
        rbac.allowed(OPERATOR, request_info("GET", "/api/v1/pods"))


def test_denied_lists_each_refused_request_once(rbac: Authorizer) -> None:
    requests = [
        request_info("PATCH", "/api/v1/namespaces/a/pods/p"),
        request_info("PATCH", "/api/v1/namespaces/a/pods/p"),
        request_info("GET", "/api/v1/pods"),
    ]
    assert rbac.denied(OPERATOR, requests) == [request_info("PATCH", "/api/v1/namespaces/a/pods/p")]


def test_unexercised_reports_grants_no_request_used(rbac: Authorizer) -> None:
    requests = [
        request_info("GET", "/api/v1/pods", {"watch": "true"}),
        request_info("GET", "/api/v1/namespaces/a/pods/p"),
        request_info("PATCH", "/apis/x.dev/v1/namespaces/a/things/t/status"),
        request_info("GET", "/metrics"),
        request_info("POST", "/api/v1/namespaces/shop/events"),
        # Not covered by the RoleBinding in shop: it does not exercise that grant.
        request_info("POST", "/api/v1/namespaces/billing/events"),
    ]
    unused = {a.describe() for a in rbac.unexercised(OPERATOR, requests)}
    assert unused == {
        "list pods (cluster-wide) via ClusterRoleBinding op",
        "get secrets ['one'] (cluster-wide) via ClusterRoleBinding op",
        # The wildcard verb is always reported: nobody can enumerate what it grants.
        "* configmaps in shop via RoleBinding shop/cm",
    }


def test_nothing_unexercised_when_every_grant_is_used() -> None:
    docs = [
        role(
            "Role",
            "r",
            [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]}],
            "n",
        ),
        binding("RoleBinding", "r", "Role", "r", "n"),
    ]
    rbac = Authorizer(docs)
    requests = [
        request_info("GET", "/api/v1/namespaces/n/configmaps/a"),
        request_info("PATCH", "/api/v1/namespaces/n/configmaps/a"),
    ]
    assert rbac.unexercised(OPERATOR, requests) == []
    assert rbac.denied(OPERATOR, requests) == []
