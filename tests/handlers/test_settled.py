"""A cycle whose inputs did not change decides nothing, and a deadline still comes on time.

The cycles read the consumer's roster, kept by the watch (played by `watches.Watch`), whose
events say what changed. A steady cycle reads no pod,
however many there are; an event, or a deadline the last decision named (a grace period
ending), makes the next cycle read and decide again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer.contracts import podstates
from eventhub_balancer.handlers import registering
from tests.handlers import test_cycles, test_daemons
from tests.support import fakes, watches

NS, NAME = test_cycles.NS, test_cycles.NAME


def fleet(pods: int) -> fakes.FakeKube:
    kube = test_cycles.make_kube()
    for i in range(pods):
        kube.add_pod(NS, f"p-{i}", labels={"app": "c"}, since=test_cycles.T0)
    return kube


def counted(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every pod read for its member state (the per-pod work of a cycle that decides)."""
    seen: list[object] = []
    original = podstates.pod_state

    def count(body: Any) -> podstates.PodState:
        seen.append(body)
        return original(body)

    monkeypatch.setattr(podstates, "pod_state", count)
    return seen


async def settle(replica: watches.Replica) -> None:
    """Cycles until one writes nothing, the watch delivering after each; then one more,
    which finds the decision settled."""
    for second in range(10):
        result = await replica.cycle(NS, NAME, now=test_cycles.at(second))
        replica.watch.deliver()
        if result is not None and not result.writes:
            break
    await replica.cycle(NS, NAME, now=test_cycles.at(10))
    assert replica.memories[NS, NAME].settled is not None


async def writes(replica: watches.Replica, second: float) -> int:
    result = await replica.cycle(NS, NAME, now=test_cycles.at(second))
    assert result is not None
    return result.writes


@pytest.mark.parametrize("pods", [2, 200])
async def test_a_steady_cycle_reads_no_pod_however_many_there_are(
    pods: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = fleet(pods)
    hubs = fakes.FakeHubs([str(p) for p in range(2 * pods)], store=fakes.FakeCheckpointStore())
    replica = watches.Replica(kube, hubs, clock=lambda: 0.0)
    await settle(replica)
    seen = counted(monkeypatch)
    for second in (11, 20, 30):
        assert await writes(replica, second) == 0
    assert seen == []


async def test_an_event_makes_the_next_cycle_read_and_decide_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = fleet(2)
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    replica = watches.Replica(kube, hubs, clock=lambda: 0.0)
    await settle(replica)
    seen = counted(monkeypatch)
    kube.set_ready(NS, "p-0", ready=False, since=test_cycles.at(11))
    replica.watch.deliver()
    assert await writes(replica, 11) > 0  # the status's pods and conditions
    assert seen  # the pod the event replaced was read again


@pytest.fixture
async def daemon() -> AsyncIterator[test_daemons.Daemon]:
    spec = {**test_daemons.SPEC, "balancing": {"intervalSeconds": 5}}
    daemon = test_daemons.Daemon(spec, "a", "b")
    task = daemon.start()
    yield daemon
    daemon.stopped.event.set()
    await asyncio.wait_for(task, timeout=60)


def deliver(daemon: test_daemons.Daemon) -> None:
    """The watch catches up with the API; its events wake the consumer."""
    daemon.deliver()
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
    deliver(daemon)
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
