"""A watch the API server (or a proxy before it) ends at once, with nothing delivered, is
asked again only after a pause that grows, as a failure is: asked again at once, one pod sent
ten watch requests a second, and a fleet of them would flood the server it waits for."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support.consumerfakes import configmap

FAULT_SECONDS = 4.0


async def test_watches_that_end_at_once_are_asked_again_with_backoff(
    kube_api: tuple[LocalKubeAPI, Path],
) -> None:
    api, kubeconfig = kube_api
    body = configmap(1, {"0": (1, "owned")})
    body["metadata"] = {
        "name": configmaps.configmap_name(consumer="orders", pod="pod-a"),
        "labels": configmaps.labels(consumer="orders", pod="pod-a"),
    }
    api.create_object("v1/configmaps", body, namespace="shop")
    client = podconfig.PodConfigMaps(
        namespace="shop", consumer="orders", pod="pod-a", kubeconfig=str(kubeconfig)
    )
    asked: list[float] = []
    watch_once = client._watch_once

    def counted(*args: Any, **kwargs: Any) -> str:
        asked.append(time.monotonic())  # each watch request the pod sends
        return watch_once(*args, **kwargs)

    client._watch_once = counted  # type: ignore[method-assign]
    updates = client.watch()
    try:
        async with asyncio.timeout(20):
            await anext(updates)  # listed
            api.inject_watch_fault(
                "close", seconds=FAULT_SECONDS, plural="configmaps", close_after_s=0.0
            )
            before = len(asked)
            reading = asyncio.ensure_future(anext(updates))
            await asyncio.sleep(FAULT_SECONDS)
            during = len(asked) - before
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
    finally:
        await updates.aclose()
    # 0.5 s doubling: about 4 in 4 s (it was 40 or more); a little room for the one in flight.
    assert during <= 6, f"{during} watch requests in {FAULT_SECONDS:g} s"
