"""The pod's acknowledgement survives hands on its ConfigMap: the local Kubernetes API and
the real client, with the runtime on the in-memory hub and store.

``kubectl annotate configmap ... eventhub-balancer.dev/applied-generation-`` (or a tool that
owns the object's annotations) takes away an answer the operator waits for: the pod must
write it again, not wait for its own state to change.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import assignments, partitions, runtime
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support import consumerfakes

NAMESPACE, POD, UID = "shop", "pod-a", "uid-a"
NAME = configmaps.configmap_name(consumer="orders", pod=POD)
APPLIED = configmaps.ANNOTATION_APPLIED_GENERATION
RELEASED = configmaps.ANNOTATION_RELEASED


def annotations(api: LocalKubeAPI) -> dict[str, str]:
    body = api.get_object("v1/configmaps", NAME, namespace=NAMESPACE) or {}
    return dict((body.get("metadata") or {}).get("annotations") or {})


async def test_annotations_removed_by_hand_are_written_again(
    kube_api: tuple[LocalKubeAPI, Path],
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
) -> None:
    api, kubeconfig = kube_api
    body = consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "revoking")})
    body["metadata"] = {
        "name": NAME,
        "labels": configmaps.labels(consumer="orders", pod=POD),
        "annotations": {configmaps.ANNOTATION_POD_UID: UID},
    }
    api.create_object("v1/configmaps", body, namespace=NAMESPACE)
    client = podconfig.PodConfigMaps(
        namespace=NAMESPACE, consumer="orders", pod=POD, pod_uid=UID, kubeconfig=str(kubeconfig)
    )
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders",
            pod=POD,
            batch=partitions.BatchSettings(batch_size=10, max_wait=0.05),
            shutdown_timeout=2.0,
        ),
        source=assignments.ConfigMapSource(client),
        backends=consumerfakes.fake_backends(fake_hub, fake_store.handle(POD)),
        processor=consumerfakes.Recorder(),
    )
    task = asyncio.create_task(consumer.run())
    try:
        await consumerfakes.eventually(
            lambda: annotations(api).get(APPLIED) == "1", what="generation 1 acknowledged"
        )
        assert configmaps.parse_released(annotations(api)) == {"1": 1}
        # kubectl annotate configmap ... applied-generation- released-
        api.patch_object(
            "v1/configmaps",
            NAME,
            {"metadata": {"annotations": {APPLIED: None, RELEASED: None}}},
            namespace=NAMESPACE,
        )
        assert APPLIED not in annotations(api)
        await consumerfakes.eventually(
            lambda: annotations(api).get(APPLIED) == "1", within=5, what="written again"
        )
        assert configmaps.parse_released(annotations(api)) == {"1": 1}
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(10):
            await task
        client.close()
