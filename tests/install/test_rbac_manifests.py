"""The Roles of the install against the API calls the operator and a consumer make.

The calls are the contract the code is written to (docs/install.md, kopf's own needs), listed here
as requests; every one must be allowed and every grant must be used by one, in each install
mode. The recording tests (tests/install/wire) check the same against the live code.

Secrets, ServiceAccounts and their tokens are granted only in a tenant namespace that opted in:
a RoleBinding to the tenant ClusterRole (the chart's tenantNamespaces, or the one a namespace's
admin creates as docs/install.md shows), which `tenant_opt_in` stands for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import loading
from tests.support.rbac.authorizing import Authorizer, Subject
from tests.support.rbac.requestinfo import RequestInfo, request_info

CR = "/apis/eventhub-balancer.dev/v1alpha1"


def operator_calls(
    namespaces: list[str], *, peering: str = "", annotate_pods: bool = False
) -> list[RequestInfo]:
    """What the operator does: cluster-wide when ``namespaces`` is empty."""
    calls = [
        request_info("GET", "/apis"),
        request_info("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
        request_info(
            "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {"watch": "true"}
        ),
    ]
    scopes = [f"/namespaces/{n}" for n in namespaces] or [""]
    for scope in scopes:
        for path in (f"{CR}{scope}/eventhubconsumers", f"/api/v1{scope}/pods"):
            calls.append(request_info("GET", path))
            calls.append(request_info("GET", path, {"watch": "true"}))
    for ns in namespaces or ["shop"]:
        calls += [
            request_info("GET", f"{CR}/namespaces/{ns}/eventhubconsumers/orders"),
            request_info("PATCH", f"{CR}/namespaces/{ns}/eventhubconsumers/orders"),
            request_info("PATCH", f"{CR}/namespaces/{ns}/eventhubconsumers/orders/status"),
            request_info("GET", f"/api/v1/namespaces/{ns}/configmaps"),
            request_info("GET", f"/api/v1/namespaces/{ns}/configmaps", {"watch": "true"}),
            request_info("POST", f"/api/v1/namespaces/{ns}/configmaps"),
            request_info("PATCH", f"/api/v1/namespaces/{ns}/configmaps/ehb-orders-orders-1"),
            # Read again by name after a write of it conflicted with a pod's acknowledgement.
            request_info("GET", f"/api/v1/namespaces/{ns}/configmaps/ehb-orders-orders-1"),
            request_info("DELETE", f"/api/v1/namespaces/{ns}/configmaps/ehb-orders-orders-0"),
            request_info("POST", f"/api/v1/namespaces/{ns}/events"),
            *tenant_calls(ns),
        ]
    # Who may read /metrics: the scraper's token, then its user's right.
    calls += [
        request_info("POST", "/apis/authentication.k8s.io/v1/tokenreviews"),
        request_info("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews"),
    ]
    if annotate_pods:
        calls += [
            request_info("PATCH", f"/api/v1/namespaces/{ns}/pods/orders-1")
            for ns in namespaces or ["shop"]
        ]
    if peering and namespaces:
        for n in namespaces:
            base = f"/apis/kopf.dev/v1/namespaces/{n}/kopfpeerings"
            calls += [
                request_info("GET", base),
                request_info("GET", base, {"watch": "true"}),
                request_info("GET", f"{base}/{peering}"),
                request_info("PATCH", f"{base}/{peering}"),
            ]
    elif peering:
        base = "/apis/kopf.dev/v1/clusterkopfpeerings"
        calls += [
            request_info("GET", base),
            request_info("GET", base, {"watch": "true"}),
            request_info("GET", f"{base}/{peering}"),
            request_info("PATCH", f"{base}/{peering}"),
        ]
    return calls


def tenant_calls(namespace: str) -> list[RequestInfo]:
    """What the operator does in a tenant's namespace that opted in."""
    return [
        request_info("GET", f"/api/v1/namespaces/{namespace}/secrets/orders-eh"),
        # spec.serviceAccountName: its client-id annotation, then a token to exchange.
        request_info("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/orders-reader"),
        request_info("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/orders-reader/token"),
    ]


def tenant_opt_in(namespace: str, *, role: str, account: tuple[str, str]) -> dict[str, object]:
    """The RoleBinding that opts ``namespace`` in: to the tenant ClusterRole ``role``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}],
    }


INSTALL_OPERATOR = ("eventhub-balancer-system", "eventhub-balancer")
CHART_OPERATOR = (loading.RELEASE_NAMESPACE, "ehb-eventhub-balancer")


def consumer_calls(namespace: str, pod: str) -> list[RequestInfo]:
    """What a consumer pod does: watch its own ConfigMap and annotate it."""
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    selector = f"eventhub-balancer.dev/pod={pod}"
    return [
        request_info("GET", configmaps, {"labelSelector": selector}),
        request_info("GET", configmaps, {"labelSelector": selector, "watch": "true"}),
        request_info("PATCH", f"{configmaps}/ehb-orders-{pod}"),
    ]


def check(rbac: Authorizer, subject: Subject, calls: list[RequestInfo]) -> None:
    denied = [r.describe() for r in rbac.denied(subject, calls)]
    assert denied == [], "the Roles refuse calls the code makes"
    unused = [a.describe() for a in rbac.unexercised(subject, calls)]
    assert unused == [], "the Roles grant more than the code uses"


def install_documents(*folders: str) -> list[dict[str, object]]:
    """The plain manifests, with namespace ``shop`` opted in as docs/install.md shows."""
    docs = loading.file_documents(*(loading.MANIFESTS_DIR / f for f in folders))
    opt_in = tenant_opt_in("shop", role="eventhub-balancer-tenant", account=INSTALL_OPERATOR)
    return [*(d.body for d in docs), opt_in]


def test_kubectl_install_is_least_privilege() -> None:
    subject = Subject.service_account(*INSTALL_OPERATOR)
    check(Authorizer(install_documents("install")), subject, operator_calls([]))


def test_kubectl_install_reads_no_secret_and_mints_no_token_where_nobody_opted_in() -> None:
    docs = loading.file_documents(loading.MANIFESTS_DIR / "install")
    rbac = Authorizer(d.body for d in docs)
    subject = Subject.service_account(*INSTALL_OPERATOR)
    for namespace in ("shop", "kube-system"):
        assert rbac.denied(subject, tenant_calls(namespace)) == sorted(tenant_calls(namespace))
    # Opted in, one namespace gets exactly the tenant rules; the others still nothing.
    rbac = Authorizer(install_documents("install"))
    assert rbac.denied(subject, tenant_calls("shop")) == []
    assert rbac.denied(subject, tenant_calls("kube-system")) == sorted(tenant_calls("kube-system"))
    assert not rbac.allowed(subject, request_info("GET", "/api/v1/namespaces/shop/secrets"))


def test_kubectl_peering_adds_only_peering() -> None:
    subject = Subject.service_account(*INSTALL_OPERATOR)
    check(
        Authorizer(install_documents("install", "peering")),
        subject,
        operator_calls([], peering="eventhub-balancer"),
    )


@pytest.mark.parametrize(
    ("values_name", "namespaces", "peering", "annotate_pods"),
    [
        (None, [], "", False),
        ("cluster-wide-values.yaml", [], "", False),
        ("namespaced-values.yaml", ["shop", "billing"], "", False),
        ("peering-values.yaml", [], "ehb-eventhub-balancer", False),
        ("namespaced-peering-values.yaml", ["shop", "billing"], "ehb-eventhub-balancer", False),
        ("servicemonitor-values.yaml", [], "", False),
        ("sovereign-values.yaml", [], "", True),
    ],
)
def test_chart_is_least_privilege(
    values_name: str | None, namespaces: list[str], peering: str, annotate_pods: bool
) -> None:
    values_file = loading.CHART_DIR / "ci" / values_name if values_name else None
    docs = [d.body for d in loading.rendered(values_file)]
    if not namespaces:  # cluster-wide: shop opts in (the watched namespaces do by themselves)
        docs.append(
            tenant_opt_in("shop", role="ehb-eventhub-balancer-tenant", account=CHART_OPERATOR)
        )
    subject = Subject.service_account(*CHART_OPERATOR)
    calls = operator_calls(namespaces, peering=peering, annotate_pods=annotate_pods)
    check(Authorizer(docs), subject, calls)


def test_the_charts_tenant_namespaces_opt_in_and_nothing_else(tmp_path: Path) -> None:
    rbac = Authorizer(d.body for d in loading.rendered(None))
    subject = Subject.service_account(*CHART_OPERATOR)
    assert rbac.denied(subject, tenant_calls("shop")) == sorted(tenant_calls("shop"))
    values = tmp_path / "values.yaml"
    values.write_text("tenantNamespaces: [shop]\n")
    rbac = Authorizer(d.body for d in loading.rendered(values))
    assert rbac.denied(subject, tenant_calls("shop")) == []
    assert rbac.denied(subject, tenant_calls("kube-system")) == sorted(tenant_calls("kube-system"))


def test_namespaced_chart_refuses_other_namespaces() -> None:
    docs = loading.rendered(loading.CHART_DIR / "ci" / "namespaced-values.yaml")
    rbac = Authorizer(d.body for d in docs)
    subject = Subject.service_account(loading.RELEASE_NAMESPACE, "ehb-eventhub-balancer")
    assert rbac.allowed(subject, request_info("GET", "/api/v1/namespaces/shop/secrets/s"))
    assert not rbac.allowed(
        subject, request_info("GET", "/api/v1/namespaces/kube-system/secrets/s")
    )
    assert not rbac.allowed(subject, request_info("GET", "/api/v1/namespaces"))
    assert not rbac.allowed(subject, request_info("GET", "/api/v1/pods"))
    # ServiceAccount tokens only for the consumers' own namespaces, never kube-system's.
    token = "/api/v1/namespaces/{}/serviceaccounts/reader/token"
    assert rbac.allowed(subject, request_info("POST", token.format("shop")))
    assert not rbac.allowed(subject, request_info("POST", token.format("kube-system")))


def test_example_consumer_role_is_least_privilege() -> None:
    docs = loading.file_documents(loading.MANIFESTS_DIR / "examples")
    subject = Subject.service_account("shop", "orders-consumer")
    rbac = Authorizer(d.body for d in docs)
    check(rbac, subject, consumer_calls("shop", "orders-consumer-7f9c-abc"))
    # Nothing of the operator's: no pods, no secrets, no other namespace.
    assert not rbac.allowed(
        subject, request_info("GET", "/api/v1/namespaces/shop/secrets/orders-eh")
    )
    assert not rbac.allowed(subject, request_info("GET", "/api/v1/namespaces/shop/pods"))
    assert not rbac.allowed(subject, request_info("GET", "/api/v1/namespaces/other/configmaps/x"))


def test_the_check_fails_on_a_missing_and_on_an_extra_grant() -> None:
    docs = install_documents("install")
    subject = Subject.service_account(*INSTALL_OPERATOR)
    with pytest.raises(AssertionError, match="refuse"):
        check(
            Authorizer(docs), subject, [*operator_calls([]), request_info("GET", "/api/v1/nodes")]
        )
    calls = [c for c in operator_calls([]) if c.resource != "secrets"]
    with pytest.raises(AssertionError, match="grant more"):
        check(Authorizer(docs), subject, calls)


def test_install_and_chart_grant_the_same() -> None:
    def rules(docs: list[loading.Document] | tuple[loading.Document, ...]) -> list[object]:
        # The operator's three (its own, the tenant one, the metrics reader), not the ones
        # Kubernetes' view/edit/admin roles gather for users.
        return [
            sorted(json.dumps(rule, sort_keys=True) for rule in d.body["rules"])
            for d in docs
            if d.kind == "ClusterRole"
            and not any("aggregate-to-" in k for k in d.body["metadata"].get("labels", {}))
        ]

    install = loading.file_documents(loading.MANIFESTS_DIR / "install")
    assert rules(install) == rules(loading.rendered(None))
