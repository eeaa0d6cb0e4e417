"""A pod's ConfigMap replaced under its name by the operator's ConfigMap for another pod (a
StatefulSet pod re-created while its predecessor's process still runs), on the local API:
the old process's acknowledgement must not land on its successor's ConfigMap. Written as a
merge patch by name, it did: the successor's `applied-generation` went back to the old
process's, and its `released` named the old process's partitions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support.consumerfakes import configmap

NAME = configmaps.configmap_name(consumer="orders", pod="pod-a")


def operators(uid: str, **annotations: str) -> dict[str, Any]:
    body = configmap(1, {"0": (1, "owned")})
    body["metadata"] = {
        "name": NAME,
        "labels": configmaps.labels(consumer="orders", pod="pod-a"),
        "annotations": {configmaps.ANNOTATION_POD_UID: uid, **annotations},
    }
    return body


def successors(api: LocalKubeAPI) -> dict[str, str]:
    """Replace the ConfigMap by the successor's, acknowledged at generation 1."""
    api.delete_object("v1/configmaps", NAME, namespace="shop")
    new = operators("uid-new", **{configmaps.ANNOTATION_APPLIED_GENERATION: "1"})
    api.create_object("v1/configmaps", new, namespace="shop")
    return dict(new["metadata"]["annotations"])


async def test_the_old_pods_acknowledgement_never_lands_on_its_successors_configmap(
    kube_api: tuple[LocalKubeAPI, Path],
) -> None:
    api, kubeconfig = kube_api
    api.create_object("v1/configmaps", operators("uid-old"), namespace="shop")
    client = podconfig.PodConfigMaps(
        namespace="shop",
        consumer="orders",
        pod="pod-a",
        pod_uid="uid-old",
        kubeconfig=str(kubeconfig),
    )
    source = assignments.ConfigMapSource(client)
    updates = source.updates()
    try:
        async with asyncio.timeout(10):
            assert (await anext(updates)).generation == 1
            await source.acknowledge(applied_generation=1, released={})
            ours = api.get_object("v1/configmaps", NAME, namespace="shop")["metadata"]
            assert ours["annotations"][configmaps.ANNOTATION_APPLIED_GENERATION] == "1"
            # Replaced before the watch tells: the patch's uid test refuses it.
            await updates.aclose()
            expected = successors(api)
            await source.acknowledge(applied_generation=0, released={"0": 1})
            current = api.get_object("v1/configmaps", NAME, namespace="shop")["metadata"]
            assert current["annotations"] == expected
            # Seen by the watch (deleted, then another pod's): nothing is sent at all.
            updates = source.updates()
            assert (await anext(updates)).partitions == {}
            successors(api)
            await asyncio.sleep(0.5)
            await source.acknowledge(applied_generation=0, released={"0": 1})
    finally:
        await updates.aclose()
        client.close()
    current = api.get_object("v1/configmaps", NAME, namespace="shop")["metadata"]
    assert current["annotations"] == expected
