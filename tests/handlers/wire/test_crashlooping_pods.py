"""Every consumer pod crash-looping, with the operator on the local stack: the Ready condition
(what ``kubectl describe ehc`` and ``ehb status`` print) names the pods and what their
containers wait on, as the kubelet writes it in the pods' status."""

from __future__ import annotations

import asyncio

from eventhub_balancer.adapters import blobs
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.azurite import Azurite
from tests.support.fixtures.operator import Stack, wait_for


def checkpoint_store(stack: Stack, ns: str, azurite: Azurite) -> None:
    """Secret ``blob`` and its container ``checkpoints``, as the consumer's spec names them."""

    async def create() -> None:
        async with blobs.open_container(
            container_name="checkpoints", connection_string=azurite.connection_string
        ) as container:
            await blobs.ensure_container(container)

    asyncio.run(create())
    clusters.LocalCluster.secret(stack, ns, name="blob", key="cs", value=azurite.connection_string)


def crash_loop(stack: Stack, ns: str, name: str, reason: str) -> None:
    """What the kubelet writes of a container it waits to start again."""
    stack.kube.patch_object(
        "v1/pods",
        name,
        {
            "status": {
                "containerStatuses": [
                    {
                        "name": "c",
                        "ready": False,
                        "restartCount": 7,
                        "state": {"waiting": {"reason": reason}},
                        "lastState": {
                            "terminated": {
                                "exitCode": 127,
                                "reason": "Error",
                                "finishedAt": clusters.stamp(),
                            }
                        },
                    }
                ]
            }
        },
        namespace=ns,
        subresource="status",
    )


def test_crash_looping_pods_are_named_with_their_containers_reason(
    operator_stack: Stack, namespace: str, azurite: Azurite
) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    checkpoint_store(stack, ns, azurite)
    stack.consumer(ns, hub="small")
    for name, reason in (("c-0", "CrashLoopBackOff"), ("c-1", "ImagePullBackOff")):
        stack.pod(ns, name, ready=False)
        crash_loop(stack, ns, name, reason)
    stack.start_operator(namespaces=(ns,))
    wait_for(lambda: stack.condition(ns, "Ready").get("reason") == "NoReadyPods")
    assert stack.condition(ns, "Ready")["message"] == (
        "2 pods match spec.selector but none is Running and Ready: c-0 CrashLoopBackOff, c-1 "
        "ImagePullBackOff (kubectl describe pod and the pods' logs say why)"
    )
