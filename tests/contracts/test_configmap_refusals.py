"""A pod applies only the operator's ConfigMap for this very pod (`configmaps.refusal`), pure.

Anyone who may patch ConfigMaps in the namespace can put the victim's two labels on one of
theirs; the pod must tell the operator's from it by name, managed-by label, labels, data and
pod uid, and it must not apply an epoch that would lock the partition for every later owner.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import bounds, configmaps

POD, CONSUMER, UID = "orders-0", "orders", "uid-0"


def operators(pod: str = POD, consumer: str = CONSUMER, uid: str = UID) -> dict[str, Any]:
    """The ConfigMap as the operator writes it for (consumer, pod)."""
    return {
        "metadata": {
            "name": configmaps.configmap_name(consumer=consumer, pod=pod),
            "labels": configmaps.labels(consumer=consumer, pod=pod),
            "annotations": {configmaps.ANNOTATION_POD_UID: uid},
        },
        "data": {"consumer": consumer, "pod": pod, "generation": "1", "partitions": "{}"},
    }


def changed(change: Any) -> dict[str, Any]:
    body = operators()
    change(body)
    return body


FORGED = {
    # The attack of issue 25: an unmanaged ConfigMap given the victim's two labels.
    "an unmanaged ConfigMap with the victim's labels": (
        changed(lambda b: b["metadata"].update(name="innocent-config")),
        configmaps.REFUSED_NAME,
    ),
    "the pinned name without the managed-by label": (
        changed(lambda b: b["metadata"]["labels"].pop(configmaps.LABEL_MANAGED_BY)),
        configmaps.REFUSED_UNMANAGED,
    ),
    "another pod's labels": (
        changed(lambda b: b["metadata"]["labels"].update({configmaps.LABEL_POD: "orders-1"})),
        configmaps.REFUSED_LABELS,
    ),
    "data for another pod": (
        changed(lambda b: b["data"].update(pod="orders-1")),
        configmaps.REFUSED_DATA,
    ),
    "data for another consumer": (
        changed(lambda b: b["data"].update(consumer="payments")),
        configmaps.REFUSED_DATA,
    ),
    "a predecessor's pod uid": (operators(uid="uid-old"), configmaps.REFUSED_POD_UID),
    "no pod uid": (
        changed(lambda b: b["metadata"].pop("annotations")),
        configmaps.REFUSED_POD_UID,
    ),
    "another pod's own ConfigMap": (operators(pod="orders-1"), configmaps.REFUSED_NAME),
    "no metadata at all": ({"data": operators()["data"]}, configmaps.REFUSED_NAME),
}


@pytest.mark.parametrize("forged", sorted(FORGED))
def test_a_configmap_that_is_not_this_pods_is_refused(forged: str) -> None:
    body, reason = FORGED[forged]
    refused = configmaps.refusal(body, consumer=CONSUMER, pod=POD, pod_uid=UID)
    assert refused is not None
    assert refused[0] == reason


def test_the_operators_configmap_for_this_pod_is_accepted() -> None:
    body = operators()
    assert configmaps.refusal(body, consumer=CONSUMER, pod=POD, pod_uid=UID) is None
    # Without POD_UID (an old Deployment) the uid cannot be compared; the rest still is.
    assert configmaps.refusal(body, consumer=CONSUMER, pod=POD, pod_uid="") is None
    long_pod = "p" * 200
    cut = operators(pod=long_pod)
    assert configmaps.refusal(cut, consumer=CONSUMER, pod=long_pod, pod_uid=UID) is None


def test_the_selector_needs_the_managed_by_label() -> None:
    selector = configmaps.pod_selector(consumer=CONSUMER, pod=POD)
    assert f"{configmaps.LABEL_MANAGED_BY}={configmaps.MANAGED_BY}" in selector.split(",")


def test_an_epoch_without_a_successor_is_not_applied() -> None:
    body = copy.deepcopy(operators())
    body["data"]["partitions"] = (
        f'{{"7": {{"epoch": {bounds.MAX_EPOCH}, "state": "owned"}}, '
        f'"8": {{"epoch": {bounds.MAX_FLOOR}, "state": "owned"}}}}'
    )
    parsed = assignments.from_configmap(body)
    assert set(parsed.partitions) == {"8"}
    assert any("partition 7" in p for p in parsed.problems)


def test_refusals_are_a_prometheus_counter_by_reason() -> None:
    from prometheus_client import generate_latest

    from eventhub_balancer.consumer import metrics

    registry = metrics.registry_for(dict, refusals=lambda: {configmaps.REFUSED_NAME: 2})
    page = generate_latest(registry).decode()
    assert 'ehb_consumer_assignment_refusals_total{reason="name"} 2.0' in page
