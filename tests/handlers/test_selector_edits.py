"""A `spec.selector` edit while a hand-off is in flight: what the next cycle does with the pods
it keeps and with those it leaves out (docs/failures.md, "A change to the spec's
coordinates").

A selector edit is no coordinate: the pods it keeps are rewritten without an epoch raised. A
running pod it leaves out is no member any more, like a pod gone: its ConfigMap is deleted
and its partitions go at once to the pods that match, at epoch + 1, its hand-off in flight
included. Nobody waits for it to release them.
"""

from __future__ import annotations

import copy
from typing import Any

from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, SPEC, at, cycle, make_kube
from tests.support import fakes


def labelled(kube: fakes.FakeKube, pod: str, tier: str) -> None:
    body = kube._get("pod", NS, pod)
    body["metadata"]["labels"]["tier"] = tier
    kube._store("pod", NS, body)


async def handing_off() -> tuple[fakes.FakeKube, fakes.FakeHubs, memories.Memory]:
    """a: 0, 1 and b: 2, 3 at epoch 1; c joins, and b's 3 is being handed to it."""
    kube = make_kube()
    labelled(kube, "a", "x")
    labelled(kube, "b", "y")
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.add_pod(NS, "c", labels={"app": "c", "tier": "x"}, since=at(1))
    await cycle(kube, hubs, memory, now=1)
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "revoking")}
    return kube, hubs, memory


def with_selector(labels: dict[str, str]) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["selector"] = {"matchLabels": labels}
    return spec


async def test_a_selector_that_keeps_every_pod_raises_no_epoch() -> None:
    kube, hubs, memory = await handing_off()
    spec = with_selector({"app": "c"})
    spec["selector"]["matchExpressions"] = [{"key": "tier", "operator": "In", "values": ["x", "y"]}]
    kube.set_spec(NS, NAME, spec)
    await cycle(kube, hubs, memory, now=2)
    assert kube.status(NS, NAME)["epochs"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert kube.assignment(NS)["b"] == {"2": (1, "owned"), "3": (1, "revoking")}


async def test_a_running_pod_the_selector_leaves_out_loses_its_partitions_at_once() -> None:
    kube, hubs, memory = await handing_off()
    kube.set_spec(NS, NAME, with_selector({"app": "c", "tier": "x"}))
    await cycle(kube, hubs, memory, now=2)
    # b still runs, but is no member: no revocation is asked of it, nothing waits for it.
    assert "b" not in kube.assignment(NS)
    assert kube.assignment(NS)["c"] == {"2": (2, "owned"), "3": (2, "owned")}
    assert kube.status(NS, NAME)["epochs"] == {"0": 1, "1": 1, "2": 2, "3": 2}
