"""A pod waiting on Azure to take up a new generation is NotReady for a bounded time only.

Taking up a partition waits on the checkpoint store (its fence) and, for some start positions
and checkpoints, on Event Hubs (a partition's bounds). In an outage those calls fail only
after their own budgets: 20 s for a store that does not answer, 15 s for a management call.
The pod used to answer /readyz 503 until then, and the operator counts a pod NotReady for
`podGraceSeconds` (20 s) as gone: every partition it owned moved, on every pod given a new
generation during the outage at once (`tests/consumer/wire/test_outage_readiness.py` replays
it on the local stack). The pod is Ready again after `takeups.TAKE_UP_READY_S` whatever it
waits on, or sooner when its ConfigMap says a shorter grace (`takeups.ready_bound`); its
acknowledgement still waits for the partitions themselves.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer.consumer import takeups
from eventhub_balancer.contracts import configmaps, specs
from tests.consumer.test_runtime import running
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime


class HangingFences(consumerfakes.FakeStoreHandle):
    """A store whose fences of the partitions in ``hanging`` wait until ``answer`` is set,
    as a store that takes requests and never answers them (within its budget)."""

    def __init__(self, store: consumerfakes.FakeStore, owner: str) -> None:
        super().__init__(store, owner)
        self.hanging: set[str] = set()
        self.answer = asyncio.Event()

    async def fence(self, partition: str, epoch: int, *, start: Any) -> Any:
        if partition in self.hanging:
            await self.answer.wait()
        return await super().fence(partition, epoch, start=start)


async def test_a_take_up_that_waits_on_the_store_turns_the_pod_notready_for_a_bounded_time(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = HangingFences(fake_store, "pod-a")
    store.hanging = {"2", "3"}
    async with running(fake_hub, store, consumerfakes.Recorder()) as (consumer, source):
        owned = {"0": (1, "owned"), "1": (1, "owned")}
        source.put(consumerfakes.configmap(1, owned))
        async with asyncio.timeout(1):
            await source.wait_for(generation=1)
        assert consumer.ready() == (True, "generation 1 applied")
        loop = asyncio.get_running_loop()
        start = loop.time()
        source.put(consumerfakes.configmap(2, {**owned, "1": (1, "revoking"), "2": (1, "owned")}))
        await asyncio.sleep(takeups.TAKE_UP_READY_S / 2)
        ready, reason = consumer.ready()
        assert not ready
        assert reason == "generation 2 not applied yet (applied: 1)"
        # A generation more while the pod waits does not start the wait over.
        source.put(
            consumerfakes.configmap(
                3, {"0": (1, "owned"), "1": (1, "revoking"), "2": (1, "owned"), "3": (1, "owned")}
            )
        )
        await consumerfakes.eventually(
            lambda: consumer.ready()[0], within=takeups.TAKE_UP_READY_S, what="Ready"
        )
        assert loop.time() - start == pytest.approx(takeups.TAKE_UP_READY_S, abs=1.0)
        assert consumer.ready() == (
            True,
            f"generation 3 not taken up within {takeups.TAKE_UP_READY_S:.0f} s; waiting for: 2, 3",
        )
        # The acknowledgement waits for the partitions themselves; the release is written.
        assert source.applied_generation == 1
        assert source.released == {"1": 1}
        assert not source.reports
        store.answer.set()
        async with asyncio.timeout(1):
            await source.wait_for(generation=3)
        assert consumer.ready() == (True, "generation 3 applied")
        # Taken up, the next generation that waits is NotReady again, for its own bound.
        store.answer.clear()
        store.hanging = {"1"}
        source.put(
            consumerfakes.configmap(
                4, {"0": (1, "owned"), "1": (2, "owned"), "2": (1, "owned"), "3": (1, "owned")}
            )
        )
        await asyncio.sleep(takeups.TAKE_UP_READY_S / 2)
        assert consumer.ready() == (False, "generation 4 not applied yet (applied: 3)")
        store.answer.set()
        async with asyncio.timeout(1):
            await source.wait_for(generation=4)


def test_the_bound_keeps_clear_of_the_grace_the_operator_wrote() -> None:
    # No grace written (the default's, or an older operator's): the 10 s of before.
    assert takeups.ready_bound(None) == takeups.TAKE_UP_READY_S == 10.0
    assert takeups.ready_bound(specs.DEFAULT_POD_GRACE_SECONDS) == takeups.TAKE_UP_READY_S
    assert takeups.ready_bound(3600) == takeups.TAKE_UP_READY_S
    # A shorter grace: what it leaves after the margin for the probe and the operator's watch.
    assert takeups.ready_bound(12) == 9.0
    assert takeups.ready_bound(7) == 4.0
    # A grace the margin takes whole, 0 included: a take-up never makes the pod NotReady.
    for grace in (3, 1, 0):
        assert takeups.ready_bound(grace) == 0.0


async def test_a_short_grace_in_the_configmap_shortens_the_take_ups_notready(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = HangingFences(fake_store, "pod-a")
    store.hanging = {"1"}
    grace = {configmaps.KEY_POD_GRACE_SECONDS: "7"}
    async with running(fake_hub, store, consumerfakes.Recorder()) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **grace))
        async with asyncio.timeout(1):
            await source.wait_for(generation=1)
        loop = asyncio.get_running_loop()
        start = loop.time()
        source.put(consumerfakes.configmap(2, {"0": (1, "owned"), "1": (1, "owned")}, **grace))
        await asyncio.sleep(2)
        assert consumer.ready() == (False, "generation 2 not applied yet (applied: 1)")
        await consumerfakes.eventually(lambda: consumer.ready()[0], within=5, what="Ready")
        # 7 s of grace leave 4 s: Ready well before the operator would count the pod gone.
        assert loop.time() - start == pytest.approx(takeups.ready_bound(7), abs=0.5)
        assert consumer.ready() == (True, "generation 2 not taken up within 4 s; waiting for: 1")
        store.answer.set()
        async with asyncio.timeout(1):
            await source.wait_for(generation=2)
        assert consumer.ready() == (True, "generation 2 applied")


async def test_with_no_grace_a_take_up_never_makes_the_pod_notready(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """podGraceSeconds 0: the operator takes a NotReady pod's partitions at once, so a take-up
    that turned the pod NotReady for a single probe would cost it every partition it has."""
    store = HangingFences(fake_store, "pod-a")
    store.hanging = {"1"}
    grace = {configmaps.KEY_POD_GRACE_SECONDS: "0"}
    async with running(fake_hub, store, consumerfakes.Recorder()) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}, **grace))
        async with asyncio.timeout(1):
            await source.wait_for(generation=1)
        source.put(consumerfakes.configmap(2, {"0": (1, "owned"), "1": (1, "owned")}, **grace))
        await consumerfakes.eventually(
            lambda: consumer.latest is not None and consumer.latest.generation == 2,
            within=1,
            what="generation 2 read",
        )
        assert consumer.ready() == (True, "generation 2 not taken up within 0 s; waiting for: 1")
        assert source.applied_generation == 1
        store.answer.set()
        async with asyncio.timeout(1):
            await source.wait_for(generation=2)
        assert consumer.ready() == (True, "generation 2 applied")
