"""``weighting: lag`` while the pods keep up, through `cycles.run_cycle` over the in-memory
ports: a pod that keeps up leaves its last batch's events behind its checkpoint (up to a few
seconds of traffic, more or less at each read), and a partition that moves is checkpointed by
nobody for the seconds its hand-off takes. Those are no backlog to spread; taken for one, a
single pod joining (an autoscaler's scale-out) moved partitions back and forth for as long as
the pods ran: 116 owner changes in 90 s where 3 reach balance, on the real control plane, and
pods of a steady size moved one every few seconds (docs/planner.md)."""

from __future__ import annotations

import random

from eventhub_balancer.handlers import memories
from tests.handlers import test_cycles
from tests.handlers.test_cycles import NAME, NS, at
from tests.support import fakes

PARTITIONS = 16
RATE = 200  # events a second on each partition
IN_FLIGHT = 3.0  # at most, seconds of events a pod that keeps up has not checkpointed yet
RELEASE = 1.0  # seconds a revoked pod takes to release
STARTING = 3.0  # seconds from a take-over to the new owner's first checkpoint
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


async def owner_changes(*, pods: int, joins_at: float | None, seconds: int) -> int:
    """Cycles once a second while every partition's end grows by `RATE` and the pods process
    as above; one more pod Ready at ``joins_at``. The owner changes after the first placement."""
    kube = make_kube(pods)
    hubs = fakes.FakeHubs([str(p) for p in range(PARTITIONS)], store=fakes.FakeCheckpointStore())
    hubs.last_sequences = dict.fromkeys(hubs.ids, 0)
    memory = memories.Memory()
    shaker = random.Random(7)
    taken: dict[tuple[str, str, int], float] = {}  # (pod, partition, epoch) -> when
    revoked: dict[tuple[str, str, int], float] = {}
    owner: dict[str, str] = {}
    changes = 0
    for second in range(seconds):
        now = float(second)
        if now == joins_at:
            kube.add_pod(NS, f"p{pods}", labels=SELECTOR, since=at(now))
        hubs.last_sequences = {p: n + RATE for p, n in hubs.last_sequences.items()}
        for pod, held in kube.assignment(NS).items():
            for p, (epoch, state) in held.items():
                key = (pod, p, epoch)
                if state == "revoking":
                    if now - revoked.setdefault(key, now) >= RELEASE:
                        kube.acknowledge(NS, pod)
                    continue
                if now - taken.setdefault(key, now) >= STARTING:
                    done = hubs.last_sequences[p] - int(RATE * shaker.uniform(0, IN_FLIGHT))
                    hubs.store.blobs[p] = (epoch, done)
                else:  # the new owner fenced the blob and has not checkpointed yet
                    hubs.store.blobs[p] = (epoch, hubs.store.blobs.get(p, (0, -1))[1])
                changes += p in owner and owner[p] != pod
                owner[p] = pod
        await test_cycles.cycle(kube, hubs, memory, now=now)
    return changes


async def test_pods_that_keep_up_hold_their_partitions() -> None:
    assert await owner_changes(pods=4, joins_at=None, seconds=200) == 0


async def test_a_pod_joining_takes_its_share_once() -> None:
    """4 pods hold 4 partitions each; the fifth takes 3, one from each of three pods, and
    nothing moves after. Counting the events in flight as backlog moved them for ever."""
    assert await owner_changes(pods=4, joins_at=50, seconds=250) == 3
