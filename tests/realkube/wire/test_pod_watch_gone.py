"""The pod's own watch of its ConfigMap on a real kube-apiserver, after etcd's compaction.

The watch cache is off for ConfigMaps, so that a watch resumed from a compacted version meets
etcd, as it does once a cluster's watch cache has moved on: the real server answers 410 Gone,
the pod lists again and sees the change made meanwhile. Then the pod is cut off from the API
server (`realkube.outages`) while the operator changes its assignment and etcd is compacted:
once the outage ends the pod has the new assignment within its first reconnect, and its
acknowledgement lands.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import exceptions as k8s_errors

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.realkube import RealControlPlane, outages
from tests.support.consumerfakes import configmap, eventually

NAMESPACE = "shop"
NAME = configmaps.configmap_name(consumer="orders", pod="pod-a")
WAIT_S = 30.0
#: Short watches, so that a resume (the one that meets the compaction) comes at once.
WATCH_S = 2


@pytest.fixture(scope="module")
def uncached_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealControlPlane]:
    with RealControlPlane(
        folder=tmp_path_factory.mktemp("controlplane"),
        apiserver_flags=("--watch-cache-sizes=configmaps#0",),
    ) as plane:
        yield plane


def assignment(generation: int, partitions: dict[str, tuple[int, str]]) -> dict[str, Any]:
    body = configmap(generation, partitions)
    body["metadata"] = {"name": NAME, "labels": configmaps.labels(consumer="orders", pod="pod-a")}
    return body


def churn(kube: RealControlPlane, round_: int) -> int:
    """Other ConfigMaps written, then etcd compacted: the pod's version is gone."""
    for i in range(5):
        kube.apply_object(
            "v1/configmaps",
            {
                "metadata": {"name": f"other-{i}", "namespace": NAMESPACE},
                "data": {"r": str(round_)},
            },
        )
    return kube.compact()


async def test_the_pod_lists_again_after_410_and_after_an_outage(
    uncached_kube: RealControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = uncached_kube
    caplog.set_level(logging.INFO, logger=podconfig.__name__)
    monkeypatch.setattr(podconfig, "WATCH_SECONDS", WATCH_S)
    kube.create_object("v1/namespaces", {"metadata": {"name": NAMESPACE}})
    kube.create_object("v1/configmaps", assignment(1, {"0": (1, "owned")}), namespace=NAMESPACE)
    proxy = outages.OutageProxy(int(kube.url.rsplit(":", 1)[1])).start()
    kubeconfig = kube.write_kubeconfig(tmp_path / "pod.kubeconfig")
    kubeconfig.write_text(kubeconfig.read_text().replace(kube.url, proxy.url))
    client = podconfig.PodConfigMaps(
        namespace=NAMESPACE, consumer="orders", pod="pod-a", kubeconfig=str(kubeconfig)
    )
    gone: list[int] = []
    watching = client._watch_once

    def counted(put: Any, stop: threading.Event, version: str) -> str:
        try:
            return watching(put, stop, version)
        except k8s_errors.ApiException as e:
            gone.append(e.status)
            raise

    client._watch_once = counted  # type: ignore[method-assign]
    source = assignments.ConfigMapSource(client)
    updates = source.updates()
    try:
        async with asyncio.timeout(WAIT_S):
            assert (await anext(updates)).generation == 1
            # A resume after the compaction is answered 410 Gone: listed again, not failed.
            churn(kube, 1)
            await eventually(lambda: 410 in gone, within=WAIT_S, what="a resume answered 410")
            kube.patch_object(
                "v1/configmaps", NAME, {"data": assignment(2, {})["data"]}, namespace=NAMESPACE
            )
            assert (await anext(updates)).generation == 2
            failed = [r for r in caplog.records if "failed" in r.getMessage()]
            assert not failed, "a 410 Gone was taken for a failure (backoff, warning)"

            # Cut off while the operator revokes partition 0 and etcd is compacted.
            proxy.cut()
            revoking = assignment(3, {"0": (1, "revoking")})["data"]
            kube.patch_object("v1/configmaps", NAME, {"data": revoking}, namespace=NAMESPACE)
            churn(kube, 2)
            await asyncio.sleep(1.0)
            proxy.restore()
            restored = time.monotonic()
            third = await anext(updates)
            assert third.generation == 3
            assert third.partitions["0"].state == "revoking"
            # The first reconnect after the outage, not a backoff grown through it.
            assert time.monotonic() - restored <= WATCH_S + 2 * podconfig.QUICK_WATCH_S + 2
            while True:
                try:
                    await source.acknowledge(applied_generation=3, released={"0": 1})
                    break
                except Exception:
                    await asyncio.sleep(0.5)
    finally:
        await updates.aclose()
        client.close()
        proxy.stop()
    annotations = kube.get_object("v1/configmaps", NAME, namespace=NAMESPACE)["metadata"][
        "annotations"
    ]
    assert configmaps.parse_released(annotations) == {"0": 1}
    assert configmaps.parse_applied_generation(annotations) == 3
