"""A pod stays Ready while it releases a revoked partition.

The operator counts a NotReady pod as gone once it has been NotReady for `podGraceSeconds`
(20 s by default) and then takes every partition it owns at once, at a higher epoch
(`balancing.censuses.standing`). A release lasts as long as the batch in flight, up to
`--release-timeout` (20 s by default, more when a slow handler needs it). The pod used to
answer /readyz 503 for the whole release, so one revocation of a pod whose handler was busy
turned into a take-over of all its other partitions while it was still processing them.
The release itself is waited for through the acknowledgement (`released`), not readiness.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from eventhub_balancer.consumer import contexts, partitions
from tests.consumer.test_runtime import running
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

#: A slow handler's settings: batches of partition 1 take 25 s, so the release waits 25 s.
SLOW = partitions.BatchSettings(batch_size=5, max_wait=0.05, release_timeout=40)


class SlowOnOne(consumerfakes.Recorder):
    """Partition 1's batches take 25 s (of the loop's clock); the others none."""

    slow_calls = 0

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        if context.partition == "1":
            self.slow_calls += 1
            await asyncio.sleep(25)
        await super().__call__(events, context)


async def test_the_pod_stays_ready_while_it_releases_a_revoked_partition(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    fake_hub.append("1", 5)
    recorder = SlowOnOne()
    async with running(fake_hub, fake_store, recorder, batch=SLOW, shutdown_timeout=50) as (
        consumer,
        source,
    ):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned"), "1": (1, "owned")}))
        async with asyncio.timeout(1):
            await source.wait_for(generation=1)
        await consumerfakes.eventually(lambda: recorder.slow_calls == 1, what="partition 1 busy")
        source.put(consumerfakes.configmap(2, {"0": (1, "owned"), "1": (1, "revoking")}))
        loop = asyncio.get_running_loop()
        start = loop.time()
        readiness: list[tuple[bool, str]] = []
        while source.released.get("1") != 1:
            assert loop.time() - start < 30, "partition 1 was never released"
            readiness.append(consumer.ready())
            fake_hub.append("0", 1)  # partition 0 keeps processing meanwhile
            await asyncio.sleep(0.5)
        assert loop.time() - start > 20  # the release outlasted podGraceSeconds
        not_ready = [reason for ready, reason in readiness if not ready]
        assert not not_ready, f"NotReady during the release: {not_ready[:1]}"
        assert readiness[-1] == (True, "generation 2 taken up; releasing: 1")
        await consumerfakes.eventually(lambda: source.applied_generation == 2)
        assert consumer.ready() == (True, "generation 2 applied")
        assert ("0", 20) in recorder.done
