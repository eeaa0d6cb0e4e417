"""A pod's runtime when Event Hubs stops answering altogether (a blackhole: open connections
hang, new ones are accepted but never answered), on the emulator and Azurite, which goes on
working: every partition is reported ``failing`` within its bound, the pod stays Ready, a
revoked partition is released, and SIGTERM's release ends within ``--shutdown-timeout``
(`running_pod` stops the runtime and bounds it).

Before, the SDK's own reconnect after the hung connection's idle time-out waited for ever for
an answer: no partition was ever reported, the status said all was well. The receivers' time-outs
are shortened here (`tests/adapters/wire/test_blackholed_eventhubs.py` holds them one by one).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer.adapters import partitionbounds, receiving
from eventhub_balancer.consumer import partitions
from tests.support.consumerfakes import Recorder, configmap, eventually
from tests.support.fixtures.consumer import running_pod, send_events

BATCH = partitions.BatchSettings(
    batch_size=100, max_wait=0.1, retry_backoff=0.05, release_timeout=5.0
)
#: The shortened idle time-out and link-open bound, reopens and backoff.
IDLE_S = 1.0
OPEN_S = 1.0
#: Until every partition is reported failing: the idle time-out (up to a few seconds late),
#: two unanswered opens and their backoff, with room for a loaded machine.
FAILING_BOUND_S = 15.0
#: `running_pod`'s ``--shutdown-timeout``.
SHUTDOWN_S = 10.0


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiving, "IDLE_TIMEOUT_S", IDLE_S)
    monkeypatch.setattr(receiving, "LINK_OPEN_TIMEOUT_S", OPEN_S)
    monkeypatch.setattr(receiving, "REOPEN_ATTEMPTS", 2)
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_S", 0.1)
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_MAX_S", 0.1)
    monkeypatch.setattr(partitionbounds, "BOUNDS_TIMEOUT_S", OPEN_S)


async def test_a_blackholed_event_hubs_is_reported_and_releases_end(
    consumer_emulator: Any, azurite: Any, blob_container: Any
) -> None:
    cs = consumer_emulator.connection_string()
    await send_events(cs, "orders", {"0": 5, "1": 5, "2": 5})
    recorder = Recorder()
    container = blob_container.container_name
    owned = {p: (1, "owned") for p in "012"}
    async with running_pod(
        pod="pod-a",
        eventhub_connection_string=cs,
        blob_connection_string=azurite.connection_string,
        batch=BATCH,
        processor=recorder,
    ) as (pod, source):
        source.put(configmap(1, owned, checkpointContainer=container))
        await eventually(lambda: len(recorder.done) >= 15, within=30, what="the backlog")
        assert consumer_emulator.blackhole() >= 1

        def failing() -> bool:
            reports = pod.reports()
            return sorted(reports) == ["0", "1", "2"] and all(
                r.state == "failing" for r in reports.values()
            )

        await eventually(failing, within=FAILING_BOUND_S, what="every partition failing")
        assert pod.ready()[0], pod.ready()[1]

        source.put(configmap(2, {**owned, "2": (1, "revoking")}, checkpointContainer=container))
        async with asyncio.timeout(BATCH.release_timeout):
            await source.wait_for(generation=2, released={"2": 1})

        pod.request_shutdown()  # SIGTERM
        await eventually(lambda: pod.stopped, within=SHUTDOWN_S, what="the shutdown")
        # The failing partitions are let go of too, not left to the hand-off's timeout.
        assert source.released == {"0": 1, "1": 1, "2": 1}
