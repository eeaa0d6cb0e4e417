"""A pod given a new generation while the checkpoint store or Event Hubs does not answer, on
the local stack: it is NotReady for `takeups.TAKE_UP_READY_S` at most, its loop keeps
turning (/healthz), and its partitions are reported once their own calls give up.

Replayed with the products' budgets: a store that takes requests and never answers (the fault
proxy in front of Azurite, holding every request) failed the new partition's fence after its
20 s budget, a blackholed Event Hubs its bounds call (a checkpoint to check) after 15 s, and
the pod answered /readyz 503 until then: 20 s is `podGraceSeconds`, after which the operator
takes every partition of the pod away (every pod's, in an outage of the whole fleet).
The bound is shortened here; the budgets are not, so the take-up is still waiting when the
pod must be Ready again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer.consumer import endpoints, partitions, runtime, takeups
from eventhub_balancer_devstack import azurite as azurite_launcher
from tests.support.consumerfakes import Recorder, configmap, eventually
from tests.support.fixtures.consumer import running_pod, send_events

BATCH = partitions.BatchSettings(
    batch_size=100, max_wait=0.1, retry_backoff=0.05, release_timeout=5.0
)
#: The shortened bound on a NotReady take-up, and the room a loaded machine gets on top.
TAKE_UP_S = 2.0
SLACK_S = 4.0


@pytest.fixture(autouse=True)
def short_take_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(takeups, "TAKE_UP_READY_S", TAKE_UP_S)


async def _ready_again(pod: runtime.Runtime, generation: int) -> str:
    """Until the pod is Ready for ``generation``, within the bound and slack; the loop's
    heartbeat stays within /healthz's limit meanwhile. Returns the readiness reason."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TAKE_UP_S + SLACK_S
    while True:
        assert pod.heartbeat_age() < endpoints.HEARTBEAT_LIMIT_S, "/healthz would fail"
        ready, reason = pod.ready()
        if ready and reason.startswith(f"generation {generation} "):
            return reason
        assert loop.time() < deadline, f"still NotReady after {TAKE_UP_S + SLACK_S} s: {reason}"
        await asyncio.sleep(0.05)


async def test_a_new_partition_behind_a_hung_checkpoint_store(
    consumer_emulator: Any, azurite: Any, fault_proxy: Any, proxied_container: Any
) -> None:
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": 5, "1": 5, "2": 5})
    recorder = Recorder()
    container = proxied_container.container_name
    store = azurite_launcher.connection_string(host="127.0.0.1", port=fault_proxy.port)
    async with running_pod(
        pod="pod-a",
        eventhub_connection_string=cs,
        blob_connection_string=store,
        batch=BATCH,
        processor=recorder,
    ) as (pod, source):
        owned = {"0": (1, "owned"), "1": (1, "owned")}
        source.put(configmap(1, owned, checkpointContainer=container))
        await eventually(lambda: len(recorder.done) >= 10, within=30, what="the backlog")
        assert pod.ready() == (True, "generation 1 applied")
        fault_proxy.faults.set(delay=3600.0)  # every request held, never answered
        source.put(
            configmap(
                2, {**owned, "1": (1, "revoking"), "2": (1, "owned")}, checkpointContainer=container
            )
        )
        reason = await _ready_again(pod, 2)
        # Partition 2's fence is still within its budget: the pod waits on it, Ready.
        assert (
            reason
            == f"generation 2 not taken up within {TAKE_UP_S:.0f} s; waiting for: 2; releasing: 1"
        )
        assert not pod.workers["2"].fenced.is_set()
        fault_proxy.faults.clear()


async def test_a_new_partition_behind_a_blackholed_event_hubs(
    consumer_emulator: Any, azurite: Any, blob_container: Any
) -> None:
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {p: 5 for p in "0123"})
    recorder = Recorder()
    container = blob_container.container_name
    async with running_pod(
        pod="pod-a",
        eventhub_connection_string=cs,
        blob_connection_string=azurite.connection_string,
        batch=BATCH,
        processor=recorder,
    ) as (pod, source):
        three = {"0": (1, "owned"), "1": (1, "owned"), "2": (1, "owned")}
        source.put(configmap(1, {**three, "3": (1, "owned")}, checkpointContainer=container))
        await eventually(lambda: len(recorder.done) >= 20, within=30, what="the backlog")
        source.put(configmap(2, {**three, "3": (1, "revoking")}, checkpointContainer=container))
        async with asyncio.timeout(BATCH.release_timeout):
            await source.wait_for(generation=2, released={"3": 1})
        assert consumer_emulator.blackhole() >= 1
        # Partition 3 comes back with its checkpoint, which is checked against its bounds
        # (a management call, 15 s to give up); partition 2 is revoked.
        source.put(
            configmap(
                3,
                {**three, "2": (1, "revoking"), "3": (2, "owned")},
                checkpointContainer=container,
            )
        )
        reason = await _ready_again(pod, 3)
        assert reason.startswith(f"generation 3 not taken up within {TAKE_UP_S:.0f} s; "), reason
        assert "waiting for: 3" in reason
