"""The pod's ConfigMap, watched and annotated through the local Kubernetes API (real client)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import configmaps, partitionreports
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support.consumerfakes import configmap


def labelled(body: dict[str, Any], pod: str) -> dict[str, Any]:
    body["metadata"] = {
        "name": configmaps.configmap_name(consumer="orders", pod=pod),
        "labels": configmaps.labels(consumer="orders", pod=pod),
    }
    return body


async def test_watch_sees_changes_and_acknowledgements_land(
    kube_api: tuple[LocalKubeAPI, Path],
) -> None:
    api, kubeconfig = kube_api
    # Another pod's ConfigMap must be ignored.
    api.create_object(
        "v1/configmaps", labelled(configmap(9, {"5": (1, "owned")}), "pod-b"), namespace="shop"
    )
    client = podconfig.PodConfigMaps(
        namespace="shop", consumer="orders", pod="pod-a", kubeconfig=str(kubeconfig)
    )
    source = assignments.ConfigMapSource(client)
    updates = source.updates()
    try:
        async with asyncio.timeout(10):
            # Not written yet: an empty assignment.
            first = await anext(updates)
            assert first.partitions == {}
            assert first.generation == 0
            api.create_object(
                "v1/configmaps",
                labelled(configmap(1, {"0": (1, "owned")}), "pod-a"),
                namespace="shop",
            )
            second = await anext(updates)
            assert second.generation == 1
            assert {p: (e.epoch, e.state) for p, e in second.partitions.items()} == {
                "0": (1, "owned")
            }
            parked = partitionreports.PartitionReport(
                partition="0", epoch=1, state="parked", attempts=10, error="ValueError: bad"
            )
            await source.acknowledge(applied_generation=1, released={"3": 4}, reports={"0": parked})
            name = configmaps.configmap_name(consumer="orders", pod="pod-a")
            annotations = api.get_object("v1/configmaps", name, namespace="shop")["metadata"][
                "annotations"
            ]
            assert configmaps.parse_applied_generation(annotations) == 1
            assert configmaps.parse_released(annotations) == {"3": 4}
            assert partitionreports.parse(annotations, current={"0": 1}) == {"0": parked}
            # A report that ended is cleared.
            await source.acknowledge(applied_generation=1, released={"3": 4})
            annotations = api.get_object("v1/configmaps", name, namespace="shop")["metadata"][
                "annotations"
            ]
            assert partitionreports.parse(annotations, current={"0": 1}) == {}
            # Our own annotation patch is not news; the operator's next write is.
            api.patch_object(
                "v1/configmaps",
                name,
                {"data": configmap(2, {"0": (1, "revoking")})["data"]},
                namespace="shop",
            )
            third = await anext(updates)
            assert third.generation == 2
            assert third.partitions["0"].state == "revoking"
    finally:
        await updates.aclose()
        client.close()
