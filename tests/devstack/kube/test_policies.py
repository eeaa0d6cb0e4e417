"""ValidatingAdmissionPolicies and the identities they judge, without a server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import failures, identities, policies, resources

CONFIGMAPS = next(r for r in resources.BUILTINS if r.plural == "configmaps")
PODS = next(r for r in resources.BUILTINS if r.plural == "pods")

POD = identities.PodIdentity(
    namespace="shop", service_account="orders-consumer", pod_name="orders-a", pod_uid="uid-a"
)

#: A pod's identity may change only the annotations of the ConfigMap labelled with its name.
POLICY: dict[str, Any] = {
    "metadata": {"name": "pod-own-configmap"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["configmaps"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                }
            ]
        },
        "matchConditions": [
            {
                "name": "pod",
                "expression": "'authentication.kubernetes.io/pod-name' in request.userInfo.extra",
            }
        ],
        "variables": [
            {
                "name": "pod",
                "expression": "request.userInfo.extra['authentication.kubernetes.io/pod-name'][0]",
            }
        ],
        "validations": [
            {
                "expression": "request.operation == 'UPDATE'",
                "reason": "Forbidden",
                "message": "a pod may only update ConfigMaps",
            },
            {
                "expression": "has(oldObject.metadata.labels) && 'pod' in oldObject.metadata.labels"
                " && oldObject.metadata.labels['pod'] == variables.pod",
                "messageExpression": "'ConfigMap ' + oldObject.metadata.name + ' is not labelled "
                "pod=' + variables.pod",
            },
            {
                "expression": "object.metadata.labels == oldObject.metadata.labels && "
                "(has(object.data) ? object.data : {}) == "
                "(has(oldObject.data) ? oldObject.data : {})",
                "message": "only annotations may change",
            },
        ],
    },
}

BINDING: dict[str, Any] = {
    "metadata": {"name": "pod-own-configmap"},
    "spec": {"policyName": "pod-own-configmap", "validationActions": ["Deny"]},
}


def _configmap(pod: str = "orders-a", **data: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod}-assignment", "namespace": "shop", "labels": {"pod": pod}},
        "data": dict(data),
    }


def _attrs(
    operation: policies.Operation,
    new: dict[str, Any] | None,
    old: dict[str, Any] | None,
    *,
    user: identities.UserInfo | None = None,
) -> policies.Attributes:
    body = new or old or {}
    return policies.Attributes(
        spec=CONFIGMAPS,
        operation=operation,
        name=body["metadata"]["name"],
        namespace="shop",
        subresource=None,
        new=new,
        old=old,
        user=user or identities.user_of(f"Bearer {identities.pod_token(POD)}"),
    )


def _admit(attrs: policies.Attributes) -> None:
    policies.admit(attrs, policies=[POLICY], bindings=[BINDING])


def test_a_pod_token_becomes_its_service_account_user() -> None:
    user = identities.user_of(f"Bearer {identities.pod_token(POD)}")
    assert user["username"] == "system:serviceaccount:shop:orders-consumer"
    assert "system:serviceaccounts:shop" in user["groups"]
    assert user["extra"] == {
        "authentication.kubernetes.io/pod-name": ["orders-a"],
        "authentication.kubernetes.io/pod-uid": ["uid-a"],
    }
    assert identities.user_of("Bearer ehb-local-dummy-token")["groups"][0] == "system:masters"
    assert identities.user_of(None)["username"] == "system:anonymous"


def test_a_pod_may_annotate_its_own_configmap() -> None:
    old = _configmap(partitions="0,1")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"ack": "3"}
    _admit(_attrs("UPDATE", new, old))


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        ("data", 422, "only annotations may change"),
        ("other-pod", 422, "ConfigMap orders-b-assignment is not labelled pod=orders-a"),
        ("delete", 403, "a pod may only update ConfigMaps"),
    ],
)
def test_a_pod_may_not_change_more(change: str, code: int, message: str) -> None:
    old = _configmap("orders-b" if change == "other-pod" else "orders-a", partitions="0,1")
    new = copy.deepcopy(old)
    new["data"]["partitions"] = "0,1,2"
    attrs = _attrs("DELETE", None, old) if change == "delete" else _attrs("UPDATE", new, old)
    with pytest.raises(failures.APIFailure) as raised:
        _admit(attrs)
    status = raised.value.as_status()
    assert status["code"] == code
    assert status["reason"] == ("Forbidden" if code == 403 else "Invalid")
    assert status["message"] == (
        f'configmaps "{attrs.name}" is forbidden: ValidatingAdmissionPolicy '
        f"'pod-own-configmap' with binding 'pod-own-configmap' denied request: {message}"
    )


def test_other_users_and_resources_are_not_matched() -> None:
    old = _configmap(partitions="0")
    new = _configmap(partitions="1")
    admin = identities.user_of("Bearer ehb-local-dummy-token")
    _admit(_attrs("UPDATE", new, old, user=admin))  # matchConditions: not a pod
    pod_attrs = _attrs("UPDATE", new, old)
    policies.admit(
        policies.Attributes(**{**pod_attrs.__dict__, "spec": PODS}),
        policies=[POLICY],
        bindings=[BINDING],
    )  # matchConstraints: configmaps only


def test_unbound_or_warn_only_policies_deny_nothing() -> None:
    attrs = _attrs("UPDATE", _configmap(partitions="1"), _configmap(partitions="0"))
    policies.admit(attrs, policies=[POLICY], bindings=[])
    warn = {**BINDING, "spec": {**BINDING["spec"], "validationActions": ["Warn"]}}
    policies.admit(attrs, policies=[POLICY], bindings=[warn])


def test_binding_selectors_narrow_the_policy() -> None:
    attrs = _attrs("UPDATE", _configmap(partitions="1"), _configmap(partitions="0"))
    elsewhere = copy.deepcopy(BINDING)
    elsewhere["spec"]["matchResources"] = {"objectSelector": {"matchLabels": {"pod": "zzz"}}}
    policies.admit(attrs, policies=[POLICY], bindings=[elsewhere])
    here = copy.deepcopy(BINDING)
    here["spec"]["matchResources"] = {
        "objectSelector": {"matchExpressions": [{"key": "pod", "operator": "Exists"}]}
    }
    with pytest.raises(failures.APIFailure):
        policies.admit(attrs, policies=[POLICY], bindings=[here])


def test_a_failing_expression_denies_unless_the_policy_ignores_failures() -> None:
    broken = copy.deepcopy(POLICY)
    broken["spec"]["validations"] = [{"expression": "object.metadata.nosuchfield == 1"}]
    attrs = _attrs("UPDATE", _configmap(), _configmap())
    with pytest.raises(failures.APIFailure, match="resulted in error"):
        policies.admit(attrs, policies=[broken], bindings=[BINDING])
    broken["spec"]["failurePolicy"] = "Ignore"
    policies.admit(attrs, policies=[broken], bindings=[BINDING])
