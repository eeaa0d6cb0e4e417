"""``weighting: lag`` while the pods keep up, through `cycles.run_cycle` over the in-memory
ports: a pod that keeps up leaves its last batch's events behind its checkpoint (up to a few
seconds of traffic, more or less at each read), and a partition that moves is checkpointed by
nobody for the seconds its hand-off takes. Those are no backlog to spread; taken for one, a
single pod joining (an autoscaler's scale-out) moved partitions back and forth for as long as
the pods ran: 116 owner changes in 90 s where 3 reach balance, on the real control plane, and
pods of a steady size moved one every few seconds (docs/planner.md). At 1000 events a second
and more, what is in flight passes any fixed count: 4 steady pods moved partitions 59 to 99
times in 3 minutes with 1000 events left out of each lag, none with 10 s of each partition's
own traffic left out."""

from __future__ import annotations

import collections
import random

import pytest

from eventhub_balancer.handlers import memories
from tests.handlers import test_cycles
from tests.handlers.test_cycles import NAME, NS, at
from tests.support import fakes

PARTITIONS = 16
RATE = 200  # events a second on each partition
IN_FLIGHT = 3.0  # at most, seconds of events a pod that keeps up has not checkpointed yet
RELEASE = 1.0  # seconds a revoked pod takes to release
STARTING = 3.0  # seconds from a take-over to the new owner's first checkpoint
#: After a move, a pod that keeps up catches up at this many times the rate; a slow one
#: processes at `SLOW` times it.
CATCH_UP = 3.0
SLOW = 0.5
SELECTOR = {"app": "c"}


def make_kube(pods: int) -> fakes.FakeKube:
    kube = fakes.FakeKube()
    kube.add_consumer(NS, NAME, {**test_cycles.SPEC, "balancing": {"weighting": "lag"}})
    kube.add_secret(
        NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
    )
    kube.add_secret(NS, "blob", {"cs": "UseDevelopmentStorage=true"})
    for i in range(pods):
        kube.add_pod(NS, f"p{i}", labels=SELECTOR, since=at(0))
    return kube


async def owner_changes(
    *,
    pods: int,
    joins_at: float | None,
    seconds: int,
    rate: int = RATE,
    flight: tuple[float, float] = (0.0, IN_FLIGHT),
) -> int:
    """Cycles once a second while every partition's end grows by ``rate`` and the pods process
    as above; one more pod Ready at ``joins_at``. The owner changes after the first placement."""
    changes, _, _ = await replay(
        pods=pods, joins_at=joins_at, seconds=seconds, rate=rate, flight=flight
    )
    return changes


async def replay(
    *,
    pods: int,
    joins_at: float | None,
    seconds: int,
    rate: int,
    flight: tuple[float, float],
    slow: str | None = None,
    restarts_at: float | None = None,
) -> tuple[int, dict[str, str], float]:
    """`owner_changes`, who owns each partition at the end, and when the last change was.

    A pod that keeps up is ``flight[0]`` s behind the end plus a random part of ``flight[1]``
    s at each read (its checkpoints land that often), and catches up at `CATCH_UP` times the
    rate after a move; ``slow`` processes at `SLOW` times the rate only, so falls behind by
    minutes. The operator restarts at ``restarts_at``: it forgets all it kept."""
    kube = make_kube(pods)
    hubs = fakes.FakeHubs([str(p) for p in range(PARTITIONS)], store=fakes.FakeCheckpointStore())
    hubs.last_sequences = dict.fromkeys(hubs.ids, 0)
    memory = memories.Memory()
    shaker = random.Random(7)
    taken: dict[tuple[str, str, int], float] = {}  # (pod, partition, epoch) -> when
    revoked: dict[tuple[str, str, int], float] = {}
    owner: dict[str, str] = {}
    changes, last = 0, 0.0
    delay, period = flight
    for second in range(seconds):
        now = float(second)
        if now == joins_at:
            kube.add_pod(NS, f"p{pods}", labels=SELECTOR, since=at(now))
        if now == restarts_at:
            memory = memories.Memory()
        hubs.last_sequences = {p: n + rate for p, n in hubs.last_sequences.items()}
        for pod, held in kube.assignment(NS).items():
            for p, (epoch, state) in held.items():
                key = (pod, p, epoch)
                if state == "revoking":
                    if now - revoked.setdefault(key, now) >= RELEASE:
                        kube.acknowledge(NS, pod)
                    continue
                before = hubs.store.blobs.get(p, (0, -1))[1]
                if now - taken.setdefault(key, now) >= STARTING:
                    behind = int(rate * (delay + shaker.uniform(0, period)))
                    pace = SLOW if pod == slow else CATCH_UP
                    done = min(hubs.last_sequences[p] - behind, before + int(pace * rate))
                    hubs.store.blobs[p] = (epoch, max(before, done))
                else:  # the new owner fenced the blob and has not checkpointed yet
                    hubs.store.blobs[p] = (epoch, before)
                if p in owner and owner[p] != pod:
                    changes, last = changes + 1, now
                owner[p] = pod
        await test_cycles.cycle(kube, hubs, memory, now=now)
    return changes, owner, last


async def test_pods_that_keep_up_hold_their_partitions() -> None:
    assert await owner_changes(pods=4, joins_at=None, seconds=200) == 0


async def test_a_pod_joining_takes_its_share_once() -> None:
    """4 pods hold 4 partitions each; the fifth takes 3, one from each of three pods, and
    nothing moves after. Counting the events in flight as backlog moved them for ever."""
    assert await owner_changes(pods=4, joins_at=50, seconds=250) == 3


#: Higher rates, checkpointed as the consumer's defaults do: after each batch of 500 (cut every
#: 0.5 s at 1000 events a second), landing some 0.7 s after the batch's last event (the
#: handler, the blob's write, the operator reading the end after the blobs); or at most every
#: 5 s (``--checkpoint-interval 5``). (rate, (delay, period)) as `replay` takes them.
FAST = {
    "1000/s, a checkpoint each batch": (1000, (0.7, 0.5)),
    "2000/s, a checkpoint each batch": (2000, (0.4, 0.25)),
    "300/s, --checkpoint-interval 5": (300, (0.5, 5.0)),
}


@pytest.mark.parametrize(("rate", "flight"), FAST.values(), ids=FAST.keys())
async def test_pods_that_keep_up_at_high_rates_hold_their_partitions(
    rate: int, flight: tuple[float, float]
) -> None:
    """More than 1000 events are in flight at these rates: a fixed floor of 1000 left that
    noise as backlog, and a steady fleet of 4 pods moved partitions every few seconds."""
    assert await owner_changes(pods=4, joins_at=None, seconds=180, rate=rate, flight=flight) == 0


async def test_pods_that_checkpoint_every_30_s_hold_their_partitions() -> None:
    """Up to 30 s in flight, 20 s past the floor: weighed as backlog beside partitions that
    weighed one event each, 4 steady pods moved partitions 64 to 70 times in 3 minutes. Beside
    partitions that weigh 10 s of traffic each, that noise is within the tolerance."""
    assert (
        await owner_changes(pods=4, joins_at=None, seconds=180, rate=1000, flight=(0.5, 30.0)) == 0
    )


@pytest.mark.parametrize(("rate", "flight"), FAST.values(), ids=FAST.keys())
async def test_a_pod_joining_at_high_rates_takes_its_share_once(
    rate: int, flight: tuple[float, float]
) -> None:
    changes = await owner_changes(pods=4, joins_at=50, seconds=180, rate=rate, flight=flight)
    assert changes == 3


async def test_a_pod_minutes_behind_still_sheds_partitions() -> None:
    """A pod of 4 that processes at half the rate is a minute behind in two: that backlog is
    weighed whatever the floor, its partitions go to the pods that keep up, and then nothing
    moves. The partitions that keep up weigh their traffic, so they spread over the pods that
    keep up: weighed as one event each beside the backlog, 13 of them gathered on one pod."""
    rate, flight = FAST["1000/s, a checkpoint each batch"]
    changes, owner, last = await replay(
        pods=4, joins_at=None, seconds=240, rate=rate, flight=flight, slow="p0"
    )
    assert changes > 0
    held = collections.Counter(owner.values())
    assert held["p0"] == 1
    assert sorted(held[p] for p in ("p1", "p2", "p3")) == [5, 5, 5]
    assert last < 180


@pytest.mark.parametrize(("rate", "flight"), FAST.values(), ids=FAST.keys())
async def test_an_operator_restart_at_high_rates_moves_nothing(
    rate: int, flight: tuple[float, float]
) -> None:
    """A restarted operator has read the ends once: no rate yet, so no floor but the 1000
    events. Rebalancing on that moved 4 to 11 partitions of a steady fleet; it waits for the
    rates (the next read)."""
    changes, _, _ = await replay(
        pods=4, joins_at=None, seconds=160, rate=rate, flight=flight, restarts_at=100
    )
    assert changes == 0
