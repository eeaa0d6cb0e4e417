"""A standing trouble is reported once, not rewritten every tick: the pod's report of a
partition is what the operator copies into the EventHubConsumer's status, so a report whose
text changes by itself (a running time) turns into a ConfigMap write and a status write a
second for as long as the trouble lasts.

On fake loop time (looptime) against the in-memory fakes of `tests.support.consumerfakes`.
"""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer.consumer import partitions
from tests.consumer.test_runtime import now, running
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime


async def test_a_handler_stuck_for_minutes_is_reported_once_not_every_second(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 5)
    recorder = consumerfakes.Recorder()
    recorder.duration = 900.0  # a handler call hung on a dead socket for a quarter of an hour
    batch = partitions.BatchSettings(batch_size=10, max_wait=0.05, stuck_seconds=120)
    async with running(fake_hub, fake_store, recorder, batch=batch) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: recorder.calls == 1)
        began = recorder.starts[0][0]
        await asyncio.sleep(began + 125 - now())
        assert source.reports["0"].state == "stuck"
        first = source.reports["0"]
        assert first.error == "handler call running past the stuck limit of 120 s (attempt 1)"
        writes = source.writes
        await asyncio.sleep(600)
        # Still stuck, and said so by the one write that started it.
        assert source.reports["0"] == first
        assert source.writes == writes
        assert consumer.ready() == (True, "generation 1 applied; reported: 0 stuck")
