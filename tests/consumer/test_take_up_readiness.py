"""A pod waiting on Azure to take up a new generation is NotReady for a bounded time only.

Taking up a partition waits on the checkpoint store (its fence) and, for some start positions
and checkpoints, on Event Hubs (a partition's bounds). In an outage those calls fail only
after their own budgets: 20 s for a store that does not answer, 15 s for a management call.
The pod used to answer /readyz 503 until then, and the operator counts a pod NotReady for
`podGraceSeconds` (20 s) as gone: every partition it owned moved, on every pod given a new
generation during the outage at once (`tests/consumer/wire/test_outage_readiness.py` replays
it on the local stack). The pod is Ready again after `takeups.TAKE_UP_READY_S` whatever it
waits on; its acknowledgement still waits for the partitions themselves.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer.consumer import takeups
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
