"""A forged assignment ConfigMap is never applied: the attack of issue 25, on the local API.

The consumer Role grants ``patch`` on ConfigMaps in the namespace, so a pod (or anyone with
that right) can give an unmanaged ConfigMap the victim's two labels and forged data: all
partitions at epoch 2^63-1, another hub. The victim watches by labels; it must apply only
the operator's ConfigMap for itself, count and log the forgery, and not take the forgery's
deletion for the deletion of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import bounds, configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI

NAMESPACE, CONSUMER, POD, UID = "shop", "orders", "pod-a", "uid-a"
#: Every wait for the watch is bounded by this (seconds).
WAIT_S = 10.0


def data(generation: int, partitions: dict[str, int], **extra: str) -> dict[str, str]:
    return {
        "consumer": CONSUMER,
        "pod": POD,
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "eventHubName": "orders",
        "consumerGroup": "$Default",
        "checkpointContainer": "checkpoints",
        "generation": str(generation),
        "partitions": json.dumps(
            {p: {"epoch": e, "state": "owned"} for p, e in partitions.items()}
        ),
        **extra,
    }


def operators(generation: int, partitions: dict[str, int]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": configmaps.configmap_name(consumer=CONSUMER, pod=POD),
            "labels": configmaps.labels(consumer=CONSUMER, pod=POD),
            "annotations": {configmaps.ANNOTATION_POD_UID: UID},
        },
        "data": data(generation, partitions),
    }


def forged(name: str = "innocent-config") -> dict[str, Any]:
    """What the attacker writes: every label and annotation the victim could look for."""
    return {
        "metadata": {
            "name": name,
            "labels": configmaps.labels(consumer=CONSUMER, pod=POD),
            "annotations": {configmaps.ANNOTATION_POD_UID: UID},
        },
        "data": data(
            99, {str(p): bounds.MAX_EPOCH for p in range(4)}, eventHubName="attackers-hub"
        ),
    }


async def test_a_forged_configmap_with_the_victims_labels_is_ignored(
    kube_api: tuple[LocalKubeAPI, Path], caplog: pytest.LogCaptureFixture
) -> None:
    api, kubeconfig = kube_api
    caplog.set_level(logging.WARNING, logger=podconfig.__name__)
    api.create_object("v1/configmaps", forged(), namespace=NAMESPACE)
    client = podconfig.PodConfigMaps(
        namespace=NAMESPACE, consumer=CONSUMER, pod=POD, pod_uid=UID, kubeconfig=str(kubeconfig)
    )
    source = assignments.ConfigMapSource(client)
    updates = source.updates()
    try:
        async with asyncio.timeout(WAIT_S):
            # Only the forgery exists: nothing is applied.
            first = await anext(updates)
            assert first.partitions == {}
            assert first.event_hub_name == ""
            api.create_object("v1/configmaps", operators(1, {"0": 3}), namespace=NAMESPACE)
            second = await anext(updates)
            assert {p: e.epoch for p, e in second.partitions.items()} == {"0": 3}
            # The forgery changes (a watch event), then is deleted: neither is news, and the
            # deletion is not taken for the deletion of ours.
            api.patch_object(
                "v1/configmaps",
                "innocent-config",
                {"data": {"generation": "100"}},
                namespace=NAMESPACE,
            )
            api.delete_object("v1/configmaps", "innocent-config", namespace=NAMESPACE)
            name = configmaps.configmap_name(consumer=CONSUMER, pod=POD)
            api.patch_object(
                "v1/configmaps", name, {"data": data(2, {"0": 3, "1": 4})}, namespace=NAMESPACE
            )
            third = await anext(updates)
            assert third.generation == 2
            assert {p: e.epoch for p, e in third.partitions.items()} == {"0": 3, "1": 4}
    finally:
        await updates.aclose()
        client.close()
    assert source.refused.get(configmaps.REFUSED_NAME, 0) >= 2
    assert any("innocent-config" in r.getMessage() for r in caplog.records)


async def test_an_unmanaged_configmap_under_the_pinned_name_is_not_applied(
    kube_api: tuple[LocalKubeAPI, Path],
) -> None:
    api, kubeconfig = kube_api
    name = configmaps.configmap_name(consumer=CONSUMER, pod=POD)
    body = forged(name)
    del body["metadata"]["labels"][configmaps.LABEL_MANAGED_BY]
    api.create_object("v1/configmaps", body, namespace=NAMESPACE)
    client = podconfig.PodConfigMaps(
        namespace=NAMESPACE, consumer=CONSUMER, pod=POD, pod_uid=UID, kubeconfig=str(kubeconfig)
    )
    try:
        assert await client.get() is None  # not even listed: the selector needs managed-by
    finally:
        client.close()


async def test_a_predecessors_configmap_is_as_good_as_absent(
    kube_api: tuple[LocalKubeAPI, Path],
) -> None:
    """A StatefulSet pod re-created under the same name sees its predecessor's ConfigMap
    until the operator rewrites it with the new uid; it applies nothing meanwhile."""
    api, kubeconfig = kube_api
    old = operators(5, {"0": 3, "1": 3})
    old["metadata"]["annotations"][configmaps.ANNOTATION_POD_UID] = "uid-predecessor"
    api.create_object("v1/configmaps", old, namespace=NAMESPACE)
    client = podconfig.PodConfigMaps(
        namespace=NAMESPACE, consumer=CONSUMER, pod=POD, pod_uid=UID, kubeconfig=str(kubeconfig)
    )
    source = assignments.ConfigMapSource(client)
    updates = source.updates()
    try:
        async with asyncio.timeout(WAIT_S):
            first = await anext(updates)
            assert first.partitions == {}
            name = configmaps.configmap_name(consumer=CONSUMER, pod=POD)
            api.patch_object(
                "v1/configmaps",
                name,
                {
                    "metadata": {"annotations": {configmaps.ANNOTATION_POD_UID: UID}},
                    "data": data(6, {"0": 4}),
                },
                namespace=NAMESPACE,
            )
            second = await anext(updates)
            assert {p: e.epoch for p, e in second.partitions.items()} == {"0": 4}
    finally:
        await updates.aclose()
        client.close()
    assert source.refused == {configmaps.REFUSED_POD_UID: 1}
