"""The consumers' ValidatingAdmissionPolicies, run by a real CEL implementation (cel-python).

Two policies, shipped twice (manifests/install/ and the chart): the acknowledgements policy
(on managed ConfigMaps) and the labels policy (on every ConfigMap). Both copies are evaluated
together, as the API server would, against an honest acknowledgement and forged requests.
The requests the consumer runtime really makes are checked in
tests/install/wire/test_recorded_consumer.py with the same evaluator.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from tests.support import loading
from tests.support.rbac import admission

POD = "orders-consumer-0"
UID = "uid-1"
USER = "system:serviceaccount:shop:orders-consumer"
EXTRA = {
    "authentication.kubernetes.io/pod-name": [POD],
    "authentication.kubernetes.io/pod-uid": [UID],
}


class Policies:
    """One install's policies, evaluated together: a request passes only if all admit it."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.names = sorted(b["metadata"]["name"] for b in bodies)
        self.policies = [admission.Policy(b) for b in bodies]

    def denials(self, request: admission.Request) -> list[str]:
        return [m for p in self.policies for m in p.denials(request)]


def on_configmaps(body: dict[str, Any]) -> bool:
    """A policy of the consumers' ConfigMaps (the token policies are test_token_policies')."""
    rules = body["spec"]["matchConstraints"]["resourceRules"]
    return body.get("kind") == "ValidatingAdmissionPolicy" and any(
        "configmaps" in rule["resources"] for rule in rules
    )


def policies() -> list[tuple[str, Policies]]:
    manifests = [
        d.body
        for d in loading.file_documents(loading.MANIFESTS_DIR / "install")
        if d.body.get("kind") == "ValidatingAdmissionPolicy" and on_configmaps(d.body)
    ]
    chart = [
        d.body
        for d in loading.rendered(None)
        if d.body.get("kind") == "ValidatingAdmissionPolicy" and on_configmaps(d.body)
    ]
    found = [("manifests", Policies(manifests)), ("chart", Policies(chart))]
    assert [len(p.policies) for _, p in found] == [2, 2]
    return found


def assignment(pod: str = POD, consumer: str = "orders") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmaps.configmap_name(consumer=consumer, pod=pod),
            "namespace": "shop",
            "labels": configmaps.labels(consumer=consumer, pod=pod),
            "annotations": {configmaps.ANNOTATION_POD_UID: UID},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": UID}],
        },
        "data": {"consumer": consumer, "pod": pod, "generation": "1", "partitions": "{}"},
    }


def update(
    old: dict[str, Any],
    change: Any,
    *,
    user: str = USER,
    extra: dict[str, list[str]] = EXTRA,
    namespace: str = "shop",
) -> admission.Request:
    new = copy.deepcopy(old)
    change(new)
    return admission.Request(
        operation="UPDATE",
        username=user,
        extra=extra,
        object=new,
        old_object=old,
        namespace=namespace,
    )


def unmanaged(name: str = "innocent-config") -> dict[str, Any]:
    """A ConfigMap the pod may legitimately write (its own application's)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "orders"}},
        "data": {"setting": "1"},
    }


def forge_labels(body: dict[str, Any]) -> None:
    """Issue 25's attack: the victim's two labels on a ConfigMap the operator never wrote."""
    wanted = configmaps.labels(consumer="orders", pod="orders-consumer-1")
    body["metadata"]["labels"].update(
        {k: wanted[k] for k in (configmaps.LABEL_CONSUMER, configmaps.LABEL_POD)}
    )
    body["data"] = {"consumer": "orders", "pod": "orders-consumer-1", "partitions": "{}"}


def create(body: dict[str, Any]) -> admission.Request:
    return admission.Request(
        operation="CREATE",
        username=USER,
        extra=EXTRA,
        object=body,
        old_object=None,
        namespace="shop",
    )


def acknowledge(body: dict[str, Any]) -> None:
    body["metadata"]["annotations"][configmaps.ANNOTATION_RELEASED] = '{"7":3}'
    body["metadata"]["annotations"][configmaps.ANNOTATION_APPLIED_GENERATION] = "1"
    body["metadata"]["annotations"][configmaps.ANNOTATION_PARTITION_REPORTS] = (
        '{"7":{"epoch":3,"state":"parked","attempts":10,"error":"ValueError: bad"}}'
    )


def steal(body: dict[str, Any]) -> None:
    body["data"]["partitions"] = '{"7":{"epoch":999,"state":"owned"}}'


def unmanage(body: dict[str, Any]) -> None:
    """Drop the managed-by label and steal in the same write (the old object still matches)."""
    del body["metadata"]["labels"][configmaps.LABEL_MANAGED_BY]
    steal(body)


FORGED = {
    "a data change": lambda: update(assignment(), steal),
    "a label change": lambda: update(
        assignment(), lambda b: b["metadata"]["labels"].update({configmaps.LABEL_POD: "x"})
    ),
    "another annotation": lambda: update(
        assignment(), lambda b: b["metadata"]["annotations"].update({"x": "y"})
    ),
    "the pod-uid annotation": lambda: update(
        assignment(),
        lambda b: b["metadata"]["annotations"].update({configmaps.ANNOTATION_POD_UID: "u2"}),
    ),
    "another pod's ConfigMap": lambda: update(assignment(pod="orders-consumer-1"), acknowledge),
    "another consumer's ConfigMap": lambda: update(
        assignment(pod="payments-0", consumer="payments"), acknowledge
    ),
    "an oversized partition report": lambda: update(
        assignment(),
        lambda b: b["metadata"]["annotations"].update(
            {configmaps.ANNOTATION_PARTITION_REPORTS: "x" * 200_000}
        ),
    ),
    "an oversized acknowledgement": lambda: update(
        assignment(),
        lambda b: b["metadata"]["annotations"].update(
            {configmaps.ANNOTATION_RELEASED: "x" * 200_000}
        ),
    ),
    "a token not bound to a pod": lambda: admission.Request(
        operation="UPDATE",
        username=USER,
        extra={},
        object=assignment(),
        old_object=assignment(),
        namespace="shop",
    ),
    "a create": lambda: create(assignment()),
    "a delete": lambda: admission.Request(
        operation="DELETE",
        username=USER,
        extra=EXTRA,
        object=None,
        old_object=assignment(),
        namespace="shop",
    ),
    # Issue 25: an unmanaged ConfigMap labelled for another pod, by update or by create.
    "the victim's labels on an unmanaged ConfigMap": lambda: update(unmanaged(), forge_labels),
    "an unmanaged ConfigMap created with the victim's labels": lambda: create(
        changed(unmanaged(), forge_labels)
    ),
    "the managed-by label on an unmanaged ConfigMap": lambda: update(
        unmanaged(),
        lambda b: b["metadata"]["labels"].update(
            {configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY}
        ),
    ),
    "the managed-by label removed to write the data": lambda: update(assignment(), unmanage),
    # Issue 25, low: the pod-name claim alone is not the pod.
    "a pod of the same name in another namespace": lambda: update(
        assignment(), acknowledge, user="system:serviceaccount:evil:orders-consumer"
    ),
    "the right pod name with another pod's uid": lambda: update(
        assignment(),
        acknowledge,
        extra={**EXTRA, "authentication.kubernetes.io/pod-uid": ["uid-other"]},
    ),
    "a token without a pod-uid claim": lambda: update(
        assignment(),
        acknowledge,
        extra={"authentication.kubernetes.io/pod-name": [POD]},
    ),
}


def changed(body: dict[str, Any], change: Any) -> dict[str, Any]:
    change(body)
    return body


@pytest.mark.parametrize("where", ["manifests", "chart"])
def test_a_consumer_may_acknowledge_on_its_own_configmap(where: str) -> None:
    policy = dict(policies())[where]
    assert policy.denials(update(assignment(), acknowledge)) == []


@pytest.mark.parametrize("where", ["manifests", "chart"])
def test_a_consumer_may_still_write_its_own_configmaps(where: str) -> None:
    policy = dict(policies())[where]
    assert policy.denials(create(unmanaged())) == []
    assert policy.denials(update(unmanaged(), lambda b: b["data"].update(setting="2"))) == []


@pytest.mark.parametrize("where", ["manifests", "chart"])
@pytest.mark.parametrize("forged", sorted(FORGED))
def test_a_consumer_may_change_nothing_else(where: str, forged: str) -> None:
    policy = dict(policies())[where]
    assert policy.denials(FORGED[forged]()) != [], forged


def test_the_operator_and_the_control_plane_are_not_restricted() -> None:
    for where, policy in policies():
        operator = (
            "system:serviceaccount:eventhub-balancer-system:eventhub-balancer"
            if where == "manifests"
            else next(
                f"system:serviceaccount:{d.body['metadata']['namespace']}:{d.body['metadata']['name']}"
                for d in loading.rendered(None)
                if d.body.get("kind") == "ServiceAccount"
            )
        )
        assert policy.denials(update(assignment(), steal, user=operator)) == [], where
        collector = "system:serviceaccount:kube-system:generic-garbage-collector"
        delete = admission.Request(
            operation="DELETE",
            username=collector,
            extra={},
            object=None,
            old_object=assignment(),
            namespace="shop",
        )
        assert policy.denials(delete) == [], where
        # The operator creates ConfigMaps with its labels.
        fresh = admission.Request(
            operation="CREATE",
            username=operator,
            extra={},
            object=assignment(),
            old_object=None,
            namespace="shop",
        )
        assert policy.denials(fresh) == [], where


@pytest.mark.parametrize("where", ["manifests", "chart"])
def test_a_person_labels_no_configmap_for_the_operator_but_a_cluster_admin_may(
    where: str,
) -> None:
    """The operator keeps every ConfigMap with its labels in memory: a person who may create
    ConfigMaps in a tenant namespace must not make them (a few hundred of 1 MB each took the
    shared operator past its memory limit). Their other ConfigMaps, and what they may do to
    the operator's, are unchanged; cluster admins (system:masters) are not restricted."""
    policy = dict(policies())[where]
    person = {"username": "dev@example.com", "groups": ("developers", "system:authenticated")}

    def as_person(request: admission.Request, **who: Any) -> admission.Request:
        return dataclasses.replace(request, extra={}, **{**person, **who})

    managed = {configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY}
    junk = changed(unmanaged("junk"), lambda b: b["metadata"]["labels"].update(managed))
    for request in (
        create(junk),
        create(changed(unmanaged(), forge_labels)),
        update(unmanaged(), lambda b: b["metadata"]["labels"].update(managed)),
    ):
        assert policy.denials(as_person(request)) != []
        admin = ("cluster-admins", "system:masters", "system:authenticated")
        assert policy.denials(as_person(request, groups=admin)) == []
    assert policy.denials(as_person(create(unmanaged()))) == []
    assert policy.denials(as_person(update(assignment(), steal))) == []


def test_both_copies_ship_the_same_rules() -> None:
    (_, manifests), (_, chart) = policies()
    for ours, theirs in zip(manifests.policies, chart.policies, strict=True):
        assert ours.spec["validations"] == theirs.spec["validations"]
        assert ours.spec.get("variables") == theirs.spec.get("variables")


def test_the_threat_model_names_the_acknowledgement_annotations_the_policy_allows() -> None:
    text = (loading.MANIFESTS_DIR.parent / "docs" / "threat-model.md").read_text()
    for key in configmaps.POD_WRITTEN_ANNOTATIONS:
        assert key.removeprefix(configmaps.PREFIX) in text, key
    assert "two acknowledgement annotations" not in text


def test_an_existing_service_account_must_be_named_never_the_default(tmp_path: Path) -> None:
    """With serviceAccount.create=false and no name, the exemption would be the namespace's
    default ServiceAccount: every pod that names none would be the operator to the policy."""
    values = tmp_path / "values.yaml"
    values.write_text("serviceAccount: {create: false}\n")
    with pytest.raises(Exception, match=r"set serviceAccount\.name") as caught:
        loading.rendered(values)
    assert "not default" in str(caught.value)
    values.write_text("serviceAccount: {create: false, name: default}\n")
    with pytest.raises(Exception, match=r"serviceAccount\.name"):
        loading.rendered(values)
    values.write_text("serviceAccount: {create: false, name: ops-operator}\n")
    bodies = [
        d.body
        for d in loading.rendered(values)
        if d.body.get("kind") == "ValidatingAdmissionPolicy"
    ]
    assert len(bodies) == 4  # the consumers' two, and the operator's tokens' two
    for body in bodies:
        condition = body["spec"]["matchConditions"][0]["expression"]
        assert f"system:serviceaccount:{loading.RELEASE_NAMESPACE}:ops-operator" in condition
        assert ":default'" not in condition
