"""A pod whose RBAC is taken away for a while (a GitOps prune of its RoleBinding, a Role
edited) and then given back, on the local API with kube-apiserver's own 403 answers.

The pod's ConfigMap watch used to end with an error at the third refusal: the runtime
released every partition and the process exited, so that each pod of the consumer stopped
processing and crash-looped, and stayed in the kubelet's back-off (up to 5 minutes) after
the RoleBinding came back. Now it goes on with its last assignment (its epochs fence it out
of whatever moved meanwhile), says the cause once with what to grant, and reads its
ConfigMap again as soon as it may.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import kmock
import pytest

from eventhub_balancer.adapters import podconfig, podreconnects
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support.consumerfakes import configmap

#: Requests refused before the RoleBinding is back (lists and watches alike).
REFUSED = 5
USER = "system:serviceaccount:shop:orders-consumer"


def forbidden(verb: str) -> bytes:
    """kube-apiserver's answer to a request its RBAC refuses."""
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f'configmaps is forbidden: User "{USER}" cannot {verb} resource '
            '"configmaps" in API group "" in the namespace "shop"',
            "reason": "Forbidden",
            "details": {"kind": "configmaps"},
            "code": 403,
        }
    ).encode()


async def test_a_revoked_role_binding_is_ridden_out_and_said_once(
    kube_api: tuple[LocalKubeAPI, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, kubeconfig = kube_api
    # The same policy, a tenth of its pauses: the test stays short.
    backoff = podreconnects.backoff
    monkeypatch.setattr(podreconnects, "backoff", lambda n, **kw: backoff(n, **kw) / 10)
    body = configmap(1, {"0": (1, "owned")})
    body["metadata"] = {
        "name": configmaps.configmap_name(consumer="orders", pod="pod-a"),
        "labels": configmaps.labels(consumer="orders", pod="pod-a"),
    }
    api.create_object("v1/configmaps", body, namespace="shop")
    client = podconfig.PodConfigMaps(
        namespace="shop", consumer="orders", pod="pod-a", kubeconfig=str(kubeconfig)
    )
    caplog.set_level(logging.INFO, logger=podconfig.__name__)
    updates = client.watch()
    try:
        async with asyncio.timeout(12):
            first = await anext(updates)
            assert first["data"]["generation"] == "1"
            # The RoleBinding is pruned: the open watch ends, and what the pod asks is refused.
            (
                api.handler["watch", kmock.resource("v1/configmaps")][:REFUSED]
                << 403
                << forbidden("watch")
            )
            (
                api.handler["list", kmock.resource("v1/configmaps")][:REFUSED]
                << 403
                << forbidden("list")
            )
            api.inject_watch_fault("close", seconds=0.5, plural="configmaps")
            api.patch_object(
                "v1/configmaps",
                body["metadata"]["name"],
                {"data": {"generation": "2"}},
                namespace="shop",
            )
            # Read again once the refusals are used up (the RoleBinding is back).
            while (await anext(updates))["data"]["generation"] != "2":
                pass
    finally:
        await updates.aclose()
        client.close()
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    refusals = [r for r in said if "403" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in said]
    message = refusals[0].getMessage()
    assert refusals[0].levelno == logging.ERROR
    assert f'User "{USER}" cannot' in message  # who was refused what, as the server said
    assert "list, watch and patch on configmaps" in message  # what to grant
    assert "RoleBinding" in message
    assert client.reconnects.refusal is None  # access is back
