"""A consumer pod terminating (a scale-down, a rollout, a drain) releases its partitions by
itself: while the operator waits for that, Balanced says so, naming the pod, rather than the
generic "Rebalancing"."""

from __future__ import annotations

from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, at, cycle, make_kube
from tests.support import fakes


async def test_balanced_names_the_terminating_pod_whose_release_it_waits_for() -> None:
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.acknowledge(NS, pod)
    await cycle(kube, hubs, memory, now=1)
    kube.terminate(NS, "b", at=at(2))
    await cycle(kube, hubs, memory, now=2)
    balanced = kube.condition(NS, NAME, "Balanced")
    assert (balanced["status"], balanced["reason"]) == ("False", "PodsLeaving")
    assert balanced["message"].startswith(
        "2 partitions wait for their terminating pod (b) to release them"
    )
    kube.release_all(NS, "b")
    await cycle(kube, hubs, memory, now=3)
    assert kube.condition(NS, NAME, "Balanced")["reason"] != "PodsLeaving"
    assert set(kube.assignment(NS)["a"]) == {"0", "1", "2", "3"}
