"""An outage of the checkpoint store for the whole fleet: a partition whose worker keeps
failing stays reported ``failing`` for as long as the outage lasts, not only during the
backoff pauses between its attempts. Each report that came and went was a ConfigMap write, a
status write, a `PartitionFailing` and a `PartitionRecovered` Event per pod, and the
consumer's `Ready` flapping between `AllPartitionsFailing` and `AllPartitionsOwned`.

On fake loop time (looptime) against the in-memory fakes of `tests.support.consumerfakes`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import acknowledgements, restarts
from tests.consumer.test_runtime import now, running
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

#: What a checkpoint operation spends before it gives up on an unreachable store.
BUDGET_S = 20.0


class DownStore(consumerfakes.FakeStoreHandle):
    """A store whose every operation, while ``down``, fails after the retry budget."""

    def __init__(self, store: consumerfakes.FakeStore, owner: str) -> None:
        super().__init__(store, owner)
        self.down = False

    async def _outage(self) -> None:
        if self.down:
            await asyncio.sleep(BUDGET_S)
            raise errors.CheckpointStoreUnreachable("gave up after 20 s: HTTP 503 ServerBusy")

    async def fence(
        self, partition: str, epoch: int, *, start: Any
    ) -> consumerfakes.FakeCheckpoint:
        await self._outage()
        return await super().fence(partition, epoch, start=start)

    async def update(
        self, partition: str, *, offset: str, sequence_number: int
    ) -> consumerfakes.FakeCheckpoint:
        await self._outage()
        return await super().update(partition, offset=offset, sequence_number=sequence_number)


async def test_a_partition_stays_reported_for_the_whole_store_outage(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    store = DownStore(fake_store, "pod-a")
    recorder = consumerfakes.Recorder()
    async with running(fake_hub, store, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: fake_store.history.get("0") == [4])
        store.down = True
        fake_hub.append("0", 5)  # handled, its checkpoint write fails: the worker fails
        await consumerfakes.eventually(lambda: "0" in source.reports, within=60)
        first = now()
        gaps, writes = [], source.writes
        while now() - first < 300:  # five minutes of outage, sampled every 0.5 s
            await asyncio.sleep(0.5)
            if "0" not in source.reports:
                gaps.append(round(now() - first, 1))
        assert gaps == [], f"the report went away during the outage at {gaps[:5]} s"
        assert source.reports["0"].state == "failing"
        assert "CheckpointStoreUnreachable" in source.reports["0"].error or "503" in (
            source.reports["0"].error
        )
        # One write per restart at most (the attempts count), never one per report flap.
        assert source.writes - writes <= 12
        assert consumer.ready()[0]

        store.down = False
        ended = now()
        fake_hub.append("0", 5)
        await consumerfakes.eventually(lambda: "0" not in source.reports, within=60)
        await consumerfakes.eventually(lambda: fake_store.history["0"][-1] == 14, within=60)
        # Back within the last backoff (30 s at most) plus its fence: not minutes.
        assert now() - ended <= 31


class DownHub(consumerfakes.FakeHub):
    """A hub whose receivers, while ``down``, fail as a subclass says (`refuse`)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def open(
        self, partition: str, epoch: int, position: deliveries.ReceivePosition
    ) -> consumerfakes.FakeReceiver:
        receiver = super().open(partition, epoch, position)
        if self.down:
            self.refuse(receiver)
        return receiver

    def refuse(self, receiver: consumerfakes.FakeReceiver) -> None:
        raise NotImplementedError


class DisabledHub(DownHub):
    """A hub that answers each receiver's first request only after a while, and with a
    refusal: as a disabled hub does, once the worker is fenced (the store is up)."""

    def refuse(self, receiver: consumerfakes.FakeReceiver) -> None:
        receiver.next_batch = self._disabled  # type: ignore[method-assign]

    async def _disabled(self, *, max_size: int, max_wait: float) -> deliveries.ReceivedBatch:
        await asyncio.sleep(2.0)
        raise errors.EventHubUnreachable("the messaging entity 'orders' is disabled")


class RefusedHub(DownHub):
    """A hub whose port refuses: a receiver's link never opens, its ``next_batch`` answers
    empty after each wait, and it fails once its reopens are spent."""

    #: How long a receiver's reopens take before it gives up (`receiving.REOPEN_ATTEMPTS`).
    REOPENS_S = 6.0

    def refuse(self, receiver: consumerfakes.FakeReceiver) -> None:
        receiver.start = lambda: self._never_open(receiver)  # type: ignore[method-assign]

    def _never_open(self, receiver: consumerfakes.FakeReceiver) -> None:
        receiver.started = True
        refused = errors.EventHubUnreachable("receiving failed 6 times in a row: refused")
        asyncio.get_running_loop().call_later(self.REOPENS_S, receiver.buffer.fail, refused)


@pytest.mark.parametrize(
    ("hub_kind", "error"), [(DisabledHub, "disabled"), (RefusedHub, "refused")]
)
async def test_a_partition_stays_reported_for_the_whole_hub_outage(
    fake_store: consumerfakes.FakeStore,
    hub_kind: type[DownHub],
    error: str,
) -> None:
    """The store is up, so each new attempt is fenced at once, then fails where it receives.
    The report of its last failure stays until a receive succeeds: it used to go away at each
    fence, until the next refusal (the wire test of a disabled hub caught it between two).
    Behind a refused port, the receiver hands out empty batches while its link reopens in vain:
    no answer either, though one counted as one until 7 December (`failing 0`, then `none`)."""
    hub = hub_kind()
    hub.down = True
    recorder = consumerfakes.Recorder()
    async with running(hub, fake_store, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: "0" in source.reports, within=60)
        first, gaps = now(), []
        while now() - first < 120:  # two minutes of outage, sampled every 0.25 s
            await asyncio.sleep(0.25)
            if "0" not in source.reports:
                gaps.append(round(now() - first, 2))
        assert gaps == [], f"the report went away during the outage at {gaps[:5]} s"
        assert error in source.reports["0"].error

        hub.down = False
        hub.append("0", 3)
        await consumerfakes.eventually(lambda: "0" not in source.reports, within=60)
        await consumerfakes.eventually(lambda: len(recorder.done) == 3, within=10)


class EndedWorker:
    """A worker whose attempt just failed: its ``finally`` set ``fenced`` (so that nothing waits
    on it), and the runtime has not dropped it from its workers yet."""

    epoch = 1
    releasing = False
    state = "failed"
    received = False

    def __init__(self) -> None:
        self.fenced = asyncio.Event()
        self.fenced.set()

    def report(self, now: float | None = None) -> None:
        return None


async def test_a_worker_that_just_failed_again_keeps_the_report_standing() -> None:
    """Between a failed attempt's end and the runtime's callback that drops the worker, a tick
    used to see a worker with ``fenced`` set and no report of its own: the report went away
    for one write, and the operator posted `PartitionRecovered` mid-outage."""
    restart = restarts.Restart(failures=3, not_before=0.0, error="CheckpointStoreUnreachable")
    found = acknowledgements.collect_reports(
        wanted={"0": 1},
        workers={"0": EndedWorker()},
        lost={},
        restarts={"0": restart},
        unopened=None,
        now=0.0,
    )
    assert found["0"].state == "failing"
    assert found["0"].attempts == 3
    assert found["0"].restarting  # no batch fails: the operator says no batch went through
