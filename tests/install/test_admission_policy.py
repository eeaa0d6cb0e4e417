"""The consumers' ValidatingAdmissionPolicy, run by a real CEL implementation (cel-python).

Shipped twice (manifests/install/ and the chart): both copies are evaluated against an honest
acknowledgement and against forged requests. The requests the consumer runtime really makes
are checked in tests/install/wire/test_recorded_consumer.py with the same evaluator.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from tests.support import loading
from tests.support.rbac import admission

POD = "orders-consumer-0"
USER = "system:serviceaccount:shop:orders-consumer"
EXTRA = {"authentication.kubernetes.io/pod-name": [POD]}


def policies() -> list[tuple[str, admission.Policy]]:
    found = [
        ("manifests", d.body)
        for d in loading.file_documents(loading.MANIFESTS_DIR / "install")
        if d.body.get("kind") == "ValidatingAdmissionPolicy"
    ]
    found += [
        ("chart", d.body)
        for d in loading.rendered(None)
        if d.body.get("kind") == "ValidatingAdmissionPolicy"
    ]
    assert [w for w, _ in found] == ["manifests", "chart"]
    return [(w, admission.Policy(b)) for w, b in found]


def assignment(pod: str = POD, consumer: str = "orders") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmaps.configmap_name(consumer=consumer, pod=pod),
            "namespace": "shop",
            "labels": configmaps.labels(consumer=consumer, pod=pod),
            "annotations": {configmaps.ANNOTATION_POD_UID: "uid-1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": "uid-1"}],
        },
        "data": {"consumer": consumer, "pod": pod, "generation": "1", "partitions": "{}"},
    }


def update(old: dict[str, Any], change: Any, *, user: str = USER) -> admission.Request:
    new = copy.deepcopy(old)
    change(new)
    return admission.Request(
        operation="UPDATE", username=user, extra=EXTRA, object=new, old_object=old
    )


def acknowledge(body: dict[str, Any]) -> None:
    body["metadata"]["annotations"][configmaps.ANNOTATION_RELEASED] = '{"7":3}'
    body["metadata"]["annotations"][configmaps.ANNOTATION_APPLIED_GENERATION] = "1"
    body["metadata"]["annotations"][configmaps.ANNOTATION_PARTITION_REPORTS] = (
        '{"7":{"epoch":3,"state":"parked","attempts":10,"error":"ValueError: bad"}}'
    )


def steal(body: dict[str, Any]) -> None:
    body["data"]["partitions"] = '{"7":{"epoch":999,"state":"owned"}}'


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
    ),
    "a create": lambda: admission.Request(
        operation="CREATE", username=USER, extra=EXTRA, object=assignment(), old_object=None
    ),
    "a delete": lambda: admission.Request(
        operation="DELETE", username=USER, extra=EXTRA, object=None, old_object=assignment()
    ),
}


@pytest.mark.parametrize("where", ["manifests", "chart"])
def test_a_consumer_may_acknowledge_on_its_own_configmap(where: str) -> None:
    policy = dict(policies())[where]
    assert policy.denials(update(assignment(), acknowledge)) == []


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
            operation="DELETE", username=collector, extra={}, object=None, old_object=assignment()
        )
        assert policy.denials(delete) == [], where
