"""Times written on other clocks than the operator's: a pod's node (the Ready condition's
lastTransitionTime), the node of an operator replica before this one (``since`` in the
status), measured against this operator's own clock."""

from __future__ import annotations

from eventhub_balancer.contracts import timestamps
from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, at, cycle, make_kube
from tests.support import fakes

#: How far the other clock is off: five minutes.
SKEW = 300.0


async def settled() -> tuple[fakes.FakeKube, fakes.FakeHubs, memories.Memory]:
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    await cycle(kube, hubs, memory, now=1)
    assert set(kube.assignment(NS)["b"]) == {"2", "3"}
    return kube, hubs, memory


async def test_a_pod_whose_node_clock_is_behind_keeps_its_partitions_for_the_grace() -> None:
    kube, hubs, memory = await settled()
    # A readiness blip at 10 s, which b's kubelet stamps on a clock five minutes behind.
    kube.set_ready(NS, "b", ready=False, since=at(10 - SKEW))
    await cycle(kube, hubs, memory, now=10)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "owned")}
    # Counted from 5 s before it was seen (`podstates.SEEN_LATE`): held 15 s at the least.
    await cycle(kube, hubs, memory, now=24.5)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "owned")}
    await cycle(kube, hubs, memory, now=25)
    assert "2" in kube.assignment(NS)["a"]


async def test_a_pod_whose_node_clock_is_ahead_loses_its_partitions_after_the_grace() -> None:
    kube, hubs, memory = await settled()
    # b stops being Ready at 10 s, stamped on a clock five minutes ahead.
    kube.set_ready(NS, "b", ready=False, since=at(10 + SKEW))
    await cycle(kube, hubs, memory, now=10)
    assert set(kube.assignment(NS)["b"]) == {"2", "3"}
    await cycle(kube, hubs, memory, now=31)
    assert kube.assignment(NS)["a"] == {
        "0": (1, "owned"),
        "1": (1, "owned"),
        "2": (2, "owned"),
        "3": (2, "owned"),
    }


async def joined_with_a_handoff() -> tuple[fakes.FakeKube, fakes.FakeHubs]:
    """a: 0, 1 and b: 2, 3; c joins at 1 s, and b's 3 is revoked for it (since 1 s, as the
    operator that revoked it read its clock); b never acknowledges."""
    kube, hubs, memory = await settled()
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(1))
    await cycle(kube, hubs, memory, now=1)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "revoking")}
    return kube, hubs


async def test_an_operator_on_a_clock_behind_times_a_handoff_out_from_its_own_start() -> None:
    kube, hubs = await joined_with_a_handoff()
    # The operator restarts at 2 s on a node whose clock is five minutes behind: the
    # hand-off's since lies in its future.
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=2 - SKEW)
    assert kube.assignment(NS)["b"]["3"] == (1, "revoking")
    # The record now holds the hand-off's start on this clock.
    [handoff] = kube.status(NS, NAME)["handoffs"]
    assert handoff["since"] == timestamps.format_time(at(2 - SKEW))
    await cycle(kube, hubs, memory, now=20 - SKEW)
    assert kube.assignment(NS)["b"]["3"] == (1, "revoking")
    # handoffTimeoutSeconds (30) after this operator first read the hand-off.
    await cycle(kube, hubs, memory, now=33 - SKEW)
    assert kube.assignment(NS)["c"] == {"3": (2, "owned")}
