"""The admission policies on the operator's ServiceAccount tokens, evaluated by a real CEL
implementation (cel-python) as the API server evaluates them, for the plain manifests and the
chart alike. The real API server's verdicts are tests/install/wire/test_install_privileges.py.

The opt-in policy runs once per param: each ServiceAccount of the request's namespace that
lacks the label (its binding's selector); with none, the binding admits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import tenantidentities
from tests.support import charts, loading
from tests.support.rbac import admission

OPERATORS = {
    "manifests": "system:serviceaccount:eventhub-balancer-system:eventhub-balancer",
    "chart": f"system:serviceaccount:{loading.RELEASE_NAMESPACE}:ehb-eventhub-balancer",
}


def token_documents(where: str) -> list[dict[str, Any]]:
    if where == "manifests":
        bodies = [d.body for d in loading.file_documents(loading.MANIFESTS_DIR / "install")]
    else:
        bodies = [d.body for d in loading.rendered(None)]
    return [
        b
        for b in bodies
        if b.get("kind", "").startswith("ValidatingAdmissionPolicy")
        and "token" in b["metadata"]["name"]
    ]


def verdict(where: str, request: admission.Request, accounts: list[dict[str, Any]]) -> list[str]:
    """Every denial of the install's token policies, as the API server would run them:
    each binding's params selected by its selector, the policy once per param."""
    documents = token_documents(where)
    policies = {
        d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"
    }
    bindings = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(policies) == len(bindings) == 2
    denials = []
    for binding in bindings:
        policy = admission.Policy(policies[binding["spec"]["policyName"]])
        ref = binding["spec"].get("paramRef")
        if ref is None:
            denials += policy.denials(request)
            continue
        (expression,) = ref["selector"]["matchExpressions"]
        assert (expression["key"], expression["operator"]) == (
            tenantidentities.OPT_IN_LABEL,
            "NotIn",
        )
        params = [
            a
            for a in accounts
            if (a["metadata"].get("labels") or {}).get(expression["key"])
            not in expression["values"]
        ]
        assert ref["parameterNotFoundAction"] == "Allow"
        for param in params:
            denials += policy.denials(request, params=param)
    return denials


def account(name: str, *, opted_in: bool) -> dict[str, Any]:
    labels = {tenantidentities.OPT_IN_LABEL: tenantidentities.OPT_IN_VALUE} if opted_in else {}
    return {"metadata": {"name": name, "namespace": "shop", "labels": labels}}


ACCOUNTS = [
    account("orders-reader", opted_in=True),
    account("default", opted_in=False),
    account("deployer", opted_in=False),
]


def request(
    where: str,
    name: str = "orders-reader",
    *,
    user: str | None = None,
    **spec: Any,
) -> admission.Request:
    """A TokenRequest as the API server hands it to admission (defaults already applied)."""
    body = {
        "audiences": [tenantidentities.AUDIENCE],
        "expirationSeconds": tenantidentities.TOKEN_SECONDS,
        "boundObjectRef": {},  # the real server passes an empty one when none was asked for
        **spec,
    }
    return admission.Request(
        operation="CREATE",
        username=user or OPERATORS[where],
        extra={},
        object={"metadata": {"name": name, "namespace": "shop"}, "spec": body},
        old_object=None,
        namespace="shop",
        name=name,
    )


@pytest.mark.parametrize("where", ["manifests", "chart"])
def test_the_operators_own_request_passes(where: str) -> None:
    assert verdict(where, request(where), ACCOUNTS) == []
    # Every ServiceAccount opted in: no param, the opt-in binding admits; the other still runs.
    assert verdict(where, request(where), [ACCOUNTS[0]]) == []


@pytest.mark.parametrize("where", ["manifests", "chart"])
@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"audiences": ["https://kubernetes.default.svc"]}, "only for the audience"),
        ({"audiences": [tenantidentities.AUDIENCE, "vault"]}, "only for the audience"),
        ({"expirationSeconds": 3600}, "at most 10 minutes"),
        ({"boundObjectRef": {"kind": "Pod", "name": "x", "uid": "u"}}, "bound to an object"),
    ],
)
def test_no_token_the_kubernetes_api_or_anyone_else_accepts(
    where: str, spec: dict[str, Any], says: str
) -> None:
    denials = verdict(where, request(where, **spec), [ACCOUNTS[0]])
    assert [d for d in denials if says in d] == denials != []


@pytest.mark.parametrize("where", ["manifests", "chart"])
def test_no_token_of_a_service_account_that_did_not_opt_in(where: str) -> None:
    (denial,) = verdict(where, request(where, "deployer"), ACCOUNTS)
    assert denial == (
        "ServiceAccount shop/deployer has not opted in: label it "
        "eventhub-balancer.dev/token-requests=allowed to lend its identity to the operator"
    )


@pytest.mark.parametrize("where", ["manifests", "chart"])
def test_only_the_operator_is_held_to_them(where: str) -> None:
    kubelet = "system:node:aks-nodepool1-0"
    assert verdict(where, request(where, "deployer", user=kubelet, audiences=[]), ACCOUNTS) == []


def test_the_release_notes_say_which_namespaces_opted_in(tmp_path: Path) -> None:
    def notes(values: dict[str, Any], scratch: str) -> str:
        return charts.notes(
            loading.CHART_DIR,
            values,
            name=loading.RELEASE,
            namespace=loading.RELEASE_NAMESPACE,
            kube_version="1.30.0",
            scratch=tmp_path / scratch,
        )

    assert "No namespace has opted in yet" in notes({}, "none")
    opted = notes({"tenantNamespaces": ["shop", "billing"]}, "two")
    assert "requests ServiceAccount tokens" in opted
    assert "only in: shop, billing." in " ".join(opted.split())
