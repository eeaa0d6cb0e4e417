"""A cycle whose inputs did not change decides nothing, and a deadline still comes on time.

The cycles read from kopf's indexes (played by `test_caching.Watch`) and the event handlers'
`registering.Operator.pod_changed` and ``wake`` say what changed. A steady cycle reads no pod,
however many there are; an event, or a deadline the last decision named (a grace period
ending), makes the next cycle read and decide again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer.contracts import podstates
from eventhub_balancer.handlers import caching, memories, registering
from tests.handlers import test_caching, test_cycles, test_daemons
from tests.support import fakes

NS, NAME = test_cycles.NS, test_cycles.NAME


def fleet(pods: int) -> fakes.FakeKube:
    kube = test_cycles.make_kube()
    for i in range(pods):
        kube.add_pod(NS, f"p-{i}", labels={"app": "c"}, since=test_cycles.T0)
    return kube


def counted(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every pod read for its member state (the per-pod work of a cycle that decides)."""
    seen: list[object] = []
    original = podstates.state_inputs

    def count(body: Any) -> tuple[object, ...]:
        seen.append(body)
        return original(body)

    monkeypatch.setattr(podstates, "state_inputs", count)
    return seen


async def settle(
    kube: fakes.FakeKube, cache: caching.CachedKube, hubs: fakes.FakeHubs, memory: memories.Memory
) -> None:
    """Cycles until one writes nothing, the watch delivering (and saying so) after each."""
    watch = test_caching.Watch(kube)
    cache.attach(watch.indexes)
    for second in range(10):
        writes = await test_caching.cycle(cache, hubs, memory, now=second)
        watch.deliver()
        cache.touch(NS, NAME)
        if not writes:
            break
    await test_caching.cycle(cache, hubs, memory, now=10)
    assert memory.settled is not None


@pytest.mark.parametrize("pods", [2, 200])
async def test_a_steady_cycle_reads_no_pod_however_many_there_are(
    pods: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = fleet(pods)
    cache = caching.CachedKube(kube, clock=lambda: 0.0)
    hubs = fakes.FakeHubs([str(p) for p in range(2 * pods)], store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await settle(kube, cache, hubs, memory)
    seen = counted(monkeypatch)
    for second in (11, 20, 30):
        assert await test_caching.cycle(cache, hubs, memory, now=second) == 0
    assert seen == []


async def test_an_event_makes_the_next_cycle_read_and_decide_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = fleet(2)
    cache = caching.CachedKube(kube, clock=lambda: 0.0)
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await settle(kube, cache, hubs, memory)
    seen = counted(monkeypatch)
    kube.remove_pod(NS, "p-0")
    cache.attach(test_caching.Watch(kube).indexes)
    cache.touch(NS, NAME)
    assert await test_caching.cycle(cache, hubs, memory, now=11) > 0
    assert seen
    assert "p-0" not in kube.assignment(NS)


@pytest.fixture
async def daemon() -> AsyncIterator[test_daemons.Daemon]:
    spec = {**test_daemons.SPEC, "balancing": {"intervalSeconds": 5}}
    daemon = test_daemons.Daemon(spec, "a", "b")
    watch = test_caching.Watch(daemon.kube)
    daemon.operator.cache.attach(watch.indexes)
    daemon.watch = watch  # type: ignore[attr-defined]
    task = daemon.start()
    yield daemon
    daemon.stopped.event.set()
    await asyncio.wait_for(task, timeout=60)


def deliver(daemon: test_daemons.Daemon) -> None:
    """The watch catches up with the API; its events wake the consumer."""
    daemon.watch.deliver()  # type: ignore[attr-defined]
    registering.Operator.wake(daemon.operator, test_daemons.KEY)


@pytest.mark.looptime
async def test_a_grace_period_ends_on_time_when_nothing_else_changes(
    daemon: test_daemons.Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    await daemon.until(1)
    deliver(daemon)
    await daemon.until(2)
    assert set(daemon.owned("a")) == {"0", "1"}
    daemon.kube.set_ready(NS, "a", ready=False, since=test_daemons.clock())
    daemon.watch.deliver()  # type: ignore[attr-defined]
    daemon.operator.pod_changed(namespace=NS, name="a", labels={"app": "c"})
    await daemon.until(3)
    deliver(daemon)  # the echo of that cycle's status write
    await daemon.until(4)
    seen, before = counted(monkeypatch), daemon.operator.cycles_run
    await daemon.until(21.9)  # podGraceSeconds 20 from the NotReady at 2
    assert daemon.operator.cycles_run >= before + 3  # the interval's cycles ran...
    assert seen == []  # ...and, nothing having changed, read no pod
    assert set(daemon.owned("a")) == {"0", "1"}
    await daemon.until(22.5)
    assert daemon.owned("a") == {}
    assert set(daemon.owned("b")) == {"0", "1", "2", "3"}
