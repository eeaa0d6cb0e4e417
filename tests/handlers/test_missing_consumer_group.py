"""A consumer group that does not exist, as the operator's cycles see it over the in-memory
ports: one condition says so (EventHubReachable, reason ConsumerGroupNotFound), Ready is
False, one Warning is posted, the next attempts wait for the backoff, and everything turns
True once the group exists.

Time is the ``now`` each cycle is given.
"""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import memories
from tests.handlers import test_cycles
from tests.support import fakes

NS, NAME = test_cycles.NS, test_cycles.NAME


def columns(kube: fakes.FakeKube) -> dict[str, Any]:
    """What ``kubectl get ehc -o wide`` shows (the CRD's printer columns)."""
    status = kube.status(NS, NAME)
    by_type = {c["type"]: c["status"] for c in status["conditions"]}
    return {
        "PARTITIONS": status.get("partitionCount"),
        "PODS": status.get("memberCount"),
        "FAILING": status.get("failingCount"),
        "BALANCED": by_type["Balanced"],
        "READY": by_type["Ready"],
    }


async def test_a_missing_consumer_group_is_said_in_one_condition_and_ready_is_false() -> None:
    kube = test_cycles.make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.missing_groups.add("$Default")
    memory = memories.Memory()

    await test_cycles.cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):  # each applies its generation, and reports its partitions failing
        kube.apply_generation(NS, pod)

    reachable = kube.condition(NS, NAME, "EventHubReachable")
    assert (reachable["status"], reachable["reason"]) == ("False", "ConsumerGroupNotFound")
    assert reachable["message"].startswith(
        "consumer group '$Default' of Event Hub 'orders' in shop.servicebus.windows.net does "
        "not exist: create it, or fix spec.eventHub.consumerGroup"
    )
    ready = kube.condition(NS, NAME, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "EventHubUnusable")
    assert columns(kube) == {
        "PARTITIONS": 4,
        "PODS": 2,
        "FAILING": 0,
        "BALANCED": "True",
        "READY": "False",
    }
    reasons = [c["reason"] for c in kube.status(NS, NAME)["conditions"]]
    assert reasons.count("ConsumerGroupNotFound") == 1
    warnings = [(e["reason"], e["type"]) for e in kube.events if e["type"] == "Warning"]
    assert warnings == [("ConsumerGroupNotFound", "Warning")]

    # The next cycles wait for the backoff before they ask again, and post nothing new.
    listed = len(hubs.listings)
    await test_cycles.cycle(kube, hubs, memory, now=1)
    assert len(hubs.listings) == listed
    assert [e["type"] for e in kube.events].count("Warning") == 1

    # However long it lasts, each attempt comes at most 30 s after the one before.
    t = 0.0
    for _ in range(8):
        asked = len(hubs.listings)
        due = memory.hub.backoff.retry_at - test_cycles.T0.timestamp()
        assert due - t <= 30
        t = due
        await test_cycles.cycle(kube, hubs, memory, now=t)
        assert len(hubs.listings) == asked + 1
    hubs.missing_groups.clear()  # someone created the group
    await test_cycles.cycle(kube, hubs, memory, now=t + 30)  # the next attempt, 30 s on
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"
    assert kube.condition(NS, NAME, "Ready")["status"] == "True"
    assert ("EventHubReachable", "Normal") in [(e["reason"], e["type"]) for e in kube.events]


class ConflictingOnce(fakes.FakeKube):
    """Someone else (kopf's own patch of the CR, say) writes the CR between the cycle's read
    and its status write, once: the write conflicts (409)."""

    conflicted = False

    async def patch_consumer_status(self, **kwargs: Any) -> Any:
        if not self.conflicted:
            self.conflicted = True
            raise errors.Conflict("patch EventHubConsumer shop/orders status: conflict")
        return await super().patch_consumer_status(**kwargs)


async def test_a_warning_is_posted_once_when_the_status_write_conflicts() -> None:
    kube = ConflictingOnce()
    fresh = test_cycles.make_kube()
    kube.objects = fresh.objects
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.missing_groups.add("$Default")
    memory = memories.Memory()
    with pytest.raises(errors.Conflict):
        await test_cycles.cycle(kube, hubs, memory, now=0)
    assert kube.events == []  # nothing of a refused decision goes out
    await test_cycles.cycle(kube, hubs, memory, now=0.5)  # the daemon decides again
    warnings = [e["reason"] for e in kube.events if e["type"] == "Warning"]
    assert warnings == ["ConsumerGroupNotFound"]
