"""One tenant's hanging Kubernetes writes never hold up another tenant's.

The operator's API calls run in a few threads (`kubeclients.WORKERS`). A tenant's namespace
whose writes hang (an admission webhook there that answers only at its time-out, an API server
slow for it) took every thread with the ConfigMap writes of one big cycle, which go out
together, and queued the rest behind them: replayed with 40 such writes held, another
namespace's one status or ConfigMap patch waited more than 12 s, as long as the held ones took
(up to the 15 s request time-out each, eight at a time: over a minute), and with it that
tenant's pods that were waiting for their partitions. Against the local API server, whose
answers in one namespace are held until the test lets them go.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import kmock

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeapi
from eventhub_balancer_devstack.kube import LocalKubeAPI

#: The held namespace's writes in flight at once: five times the client's threads.
HELD = 5 * kubeapi.WORKERS
#: How long the quiet namespace's write may take (it takes milliseconds): far less than
#: the held writes' time-out, so only a write that did not queue behind them passes.
QUIET_LIMIT = 10.0
#: How long any wait in this test may take.
LIMIT = 60.0


def configmap(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}


class Hold:
    """The server's answers to the held namespace's writes, kept until `release` (each then
    answered 500, as a webhook that timed out is), and how many arrived meanwhile."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.arrived = 0

    async def __call__(self) -> kmock.Response:
        self.arrived += 1
        for _ in range(int(LIMIT / 0.02)):
            if self.released.is_set():
                break
            await asyncio.sleep(0.02)
        return kmock.Response(status=500)


async def until(done: Callable[[], bool], *, limit: float) -> None:
    for _ in range(int(limit / 0.02)):
        if done():
            return
        await asyncio.sleep(0.02)


async def test_a_namespace_whose_writes_hang_leaves_another_its_turn(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    for namespace in ("noisy", "quiet"):
        local_kube.create_object("v1/configmaps", configmap("m"), namespace=namespace)
    hold = Hold()
    local_kube.handler["patch", kmock.resource("v1/configmaps"), kmock.namespace("noisy")] << hold
    held = [
        asyncio.ensure_future(
            operator_api.patch_configmap(
                namespace="noisy", name="m", patch={"data": {"n": str(i)}}, resource_version=None
            )
        )
        for i in range(HELD)
    ]
    try:
        # The held namespace takes as many threads as the client had before it kept any for
        # the others: a namespace alone (most installs) makes its calls at the same pace.
        await until(lambda: hold.arrived >= kubeapi.WORKERS, limit=LIMIT)
        assert hold.arrived == kubeapi.WORKERS
        patched = await asyncio.wait_for(
            operator_api.patch_configmap(
                namespace="quiet", name="m", patch={"data": {"q": "1"}}, resource_version=None
            ),
            QUIET_LIMIT,
        )
        assert patched["data"] == {"q": "1"}
        assert not any(call.done() for call in held)  # they were still held meanwhile
    finally:
        hold.released.set()
        results = await asyncio.wait_for(asyncio.gather(*held, return_exceptions=True), LIMIT)
    # Each held write still went out, in its turn, and failed as the server answered; never
    # more of them at once than the namespace's threads.
    assert all(isinstance(r, errors.ApiUnavailable) for r in results), results
    assert hold.arrived == HELD
