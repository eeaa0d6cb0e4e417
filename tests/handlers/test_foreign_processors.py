"""An SDK EventProcessorClient left running on the consumer group, found by the store's probe.

The operator lists the SDK's ``ownership/`` blobs beside its once-a-minute probe of the
checkpoint store and remembers their ETags. A running processor rewrites its claims at every
balancing pass (its receivers are refused by the pods' epochs, it releases and claims again); a
processor stopped cleanly rewrites them once, when it releases them. So only claims rewritten in
two probe intervals running count as a processor beside the pods, and two quiet intervals end
it. The daemon runs over the fakes on fake time (looptime).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from eventhub_balancer.handlers import registering
from tests.support import fakes

pytestmark = pytest.mark.looptime

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
NS, NAME = "shop", "orders"
SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "b", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "c"}},
    "balancing": {"intervalSeconds": 5},
}
FOUND = "ForeignProcessorRunning"
GONE = "ForeignProcessorStopped"


def loop_time() -> float:
    return asyncio.get_running_loop().time()


def clock() -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=loop_time())


class Stopped:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


class Consumer:
    """One consumer's daemon over the fakes, two pods, started at loop time 0."""

    def __init__(self) -> None:
        self.kube = fakes.FakeKube()
        self.kube.add_consumer(NS, NAME, SPEC)
        self.kube.add_secret(
            NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
        )
        self.kube.add_secret(NS, "b", {"cs": "UseDevelopmentStorage=true"})
        for pod in ("a", "b"):
            self.kube.add_pod(NS, pod, labels={"app": "c"}, since=T0)
        self.store = fakes.FakeCheckpointStore()
        self.hubs = fakes.FakeHubs(store=self.store)
        self.operator = registering.Operator(kube=self.kube, hubs=self.hubs, clock=clock)
        self.stopped = Stopped()

    async def until(self, seconds: float) -> None:
        await asyncio.sleep(seconds - loop_time())

    def store_condition(self) -> dict[str, Any]:
        return self.kube.condition(NS, NAME, "CheckpointStoreReachable")

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.kube.events if e["reason"] == reason]

    def assignment(self) -> dict[str, dict[str, tuple[int, str]]]:
        return self.kube.assignment(NS)


class Processor:
    """An SDK processor on the same consumer group: every ``every`` seconds it claims the
    partitions again (the pods' epochs refuse its receivers; it releases and claims anew)."""

    def __init__(self, store: fakes.FakeCheckpointStore, *, every: float = 30.0) -> None:
        self.store, self.every = store, every
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        for _ in range(1000):  # bounded: far past every test's end
            self.store.claim("0", "1")
            await asyncio.sleep(self.every)

    async def stop(self) -> None:
        """A clean stop: the claims are released (rewritten) once."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.store.claim("0", "1", "2", "3")


@pytest.fixture
async def consumer() -> AsyncIterator[Callable[[], Consumer]]:
    started: list[tuple[Consumer, asyncio.Task[None]]] = []

    def start() -> Consumer:
        c = Consumer()
        task = asyncio.create_task(
            registering.run_daemon(
                c.operator, namespace=NS, name=NAME, spec=SPEC, stopped=c.stopped
            )
        )
        started.append((c, task))
        return c

    yield start
    for c, task in started:
        c.stopped.event.set()
        await asyncio.wait_for(task, timeout=60)


async def test_a_running_processor_is_flagged_after_two_probes(
    consumer: Callable[[], Consumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    c = consumer()
    processor = Processor(c.store)
    processor.start()  # running before the consumer, as when it was forgotten
    await c.until(1)
    held = c.assignment()
    assert sorted(held) == ["a", "b"]
    # Probes at 0 (the ETags' baseline), 60 (rewritten once) and 120 (twice running).
    await c.until(119)
    assert c.store_condition()["reason"] == "CheckpointsListed"
    await c.until(121)
    condition = c.store_condition()
    assert (condition["status"], condition["reason"]) == ("False", FOUND)
    assert "consumer group '$Default' of Event Hub 'orders'" in condition["message"]
    assert "docs/operations.md#migrating-from-eventprocessorclient-and-back" in condition["message"]
    assert [e["type"] for e in c.events(FOUND)] == ["Warning"]
    warned = [r for r in caplog.records if "another reader" in r.getMessage()]
    assert [r.levelno for r in warned] == [logging.WARNING]
    assert "in the last 2 minutes, partitions 0-1)" in warned[0].getMessage()
    await c.until(400)
    # Said once while it stands; balancing goes on as before: the pods keep their partitions.
    assert c.store_condition()["reason"] == FOUND
    assert len(c.events(FOUND)) == 1
    assert len([r for r in caplog.records if "another reader" in r.getMessage()]) == 1
    assert c.assignment() == held
    # The cost: one listing of the ownership blobs per probe of the store, nothing more.
    assert c.store.claim_reads == pytest.approx([0, 60, 120, 180, 240, 300, 360])
    assert c.store.claim_reads == pytest.approx(c.store.reads)
    await processor.stop()


async def test_a_processor_stopped_cleanly_is_never_flagged(
    consumer: Callable[[], Consumer],
) -> None:
    c = consumer()
    # Stopped before the consumer came: its claims were just released (rewritten).
    c.store.claim("0", "1", "2", "3")
    processor = Processor(c.store)
    processor.start()
    await c.until(1)
    # Stopped after the first probe, as the migration's second step says: its release is
    # the only rewrite the next probe sees.
    await c.until(40)
    await processor.stop()
    await c.until(500)
    assert c.store_condition()["reason"] == "CheckpointsListed"
    assert c.events(FOUND) == []


async def test_the_flag_ends_after_two_quiet_probes(consumer: Callable[[], Consumer]) -> None:
    c = consumer()
    processor = Processor(c.store)
    processor.start()
    await c.until(121)
    assert c.store_condition()["reason"] == FOUND
    await c.until(150)
    await processor.stop()  # its release is rewritten once more: still seen at 180
    await c.until(299)
    assert c.store_condition()["reason"] == FOUND
    assert c.events(GONE) == []
    await c.until(301)  # quiet at 240 and 300
    condition = c.store_condition()
    assert (condition["status"], condition["reason"]) == ("True", "CheckpointsListed")
    assert [e["type"] for e in c.events(GONE)] == ["Normal"]
    assert len(c.events(FOUND)) == 1
    await c.until(500)
    assert len(c.events(GONE)) == 1
