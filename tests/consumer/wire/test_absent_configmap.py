"""A consumer pod that starts before the operator wrote its ConfigMap, on the local API: it
has nothing to acknowledge on, and sends nothing. It sent the patch anyway, and logged the
server's 404 as ``ConfigMap ... is gone or no longer this pod's``, at every start, of a
ConfigMap that had never been there; once its ConfigMap is written, it acknowledges on it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.consumer.wire.test_replaced_configmaps import NAME, operators


async def test_no_acknowledgement_is_sent_before_the_configmap_exists(
    kube_api: tuple[LocalKubeAPI, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    api, kubeconfig = kube_api
    client = podconfig.PodConfigMaps(
        namespace="shop",
        consumer="orders",
        pod="pod-a",
        pod_uid="uid-a",
        kubeconfig=str(kubeconfig),
    )
    source = assignments.ConfigMapSource(client)
    updates = source.updates()
    try:
        async with asyncio.timeout(10):
            assert (await anext(updates)).partitions == {}
            await source.acknowledge(applied_generation=0, released={})
            said = [r.getMessage() for r in caplog.records]
            assert not [line for line in said if "is gone" in line], said
            api.create_object("v1/configmaps", operators("uid-a"), namespace="shop")
            assert (await anext(updates)).generation == 1
            await source.acknowledge(applied_generation=1, released={})
    finally:
        await updates.aclose()
        client.close()
    annotations = api.get_object("v1/configmaps", NAME, namespace="shop")["metadata"]
    assert annotations["annotations"][configmaps.ANNOTATION_APPLIED_GENERATION] == "1"
