"""An older EventHubConsumer of another namespace, edited to name a location a consumer works
at: the consumer at work holds it, whatever the other's age (`conflicts.standing`).

Age alone was the title to a location across namespaces, and a tenant rarely lacks a CR older
than its victim's: editing one of them to name the victim's hub, group and container refused
the victim, which wrote nothing more, and the partitions of its next pod to die stayed
unprocessed. Cycles over the cache, as `test_location_bindings` runs them.
"""

from __future__ import annotations

import copy

from eventhub_balancer.reconciling import conflicts
from tests.handlers.test_location_bindings import (
    SPEC,
    SQUATTER,
    SQUATTING,
    VICTIM,
    created,
    cycle,
    squatted,
)

#: The squatter's own location before its edit: another checkpoint container.
ELSEWHERE = copy.deepcopy(SQUATTING)
ELSEWHERE["checkpointStore"]["containerName"] = "audit"


async def test_an_older_cr_edited_to_name_the_location_refuses_only_itself() -> None:
    cluster = squatted(squatter=False)
    kube, cache = cluster.kube, cluster.cache
    kube.add_consumer(*SQUATTER, ELSEWHERE)
    created(kube, SQUATTER, 0)  # long before the victim (60 s)
    cluster.deliver()
    await cycle(cache, SQUATTER, conflicts.UNBOUND, now=90)  # at work at a place of its own
    await cycle(cache, VICTIM, conflicts.UNBOUND, now=100)
    assert sorted(kube.assignment(VICTIM[0])) == ["a", "b"]
    # The squatter's tenant edits it to name the victim's container.
    kube.set_spec(*SQUATTER, SQUATTING)
    cluster.deliver()
    kept = await cycle(cache, VICTIM, conflicts.UNBOUND, now=105)
    assert all(e.reason != conflicts.REASON_SHARED for e in kept.decision.events)
    refused = await cycle(cache, SQUATTER, conflicts.UNBOUND, now=106)
    assert (refused.decision.epochs, refused.decision.writes.count) == (None, 0)
    conflict = kube.condition(*SQUATTER, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", conflicts.REASON_SHARED)
    assert "EventHubConsumer shop/orders in another namespace" in conflict["message"]
    cluster.deliver()
    # Pod b dies: the victim hands its partitions to a at once.
    kube.remove_pod(VICTIM[0], "b")
    cluster.watch.deliver("pod")
    moved = await cycle(cache, VICTIM, conflicts.UNBOUND, now=120)
    assert moved.decision.writes.count > 0
    assert sorted(kube.assignment(VICTIM[0])) == ["a"]
    assert kube.condition(*VICTIM, "Ready")["status"] == "True"
    assert all(
        c["type"] != conflicts.CONFLICT for c in kube.status(*VICTIM).get("conditions") or []
    )


async def test_the_victims_own_edit_does_not_hand_the_location_to_a_refused_squatter() -> None:
    """The squatter, refused, edits its CR again and again (each edit makes it undecided):
    the victim's own edit, which makes it undecided too until its next cycle, still comes
    first, since the squatter was refused before."""
    cluster = squatted(squatter=False)
    kube, cache = cluster.kube, cluster.cache
    await cycle(cache, VICTIM, conflicts.UNBOUND)
    kube.add_consumer(*SQUATTER, SQUATTING)
    created(kube, SQUATTER, 0)
    cluster.deliver()
    await cycle(cache, SQUATTER, conflicts.UNBOUND, now=105)
    assert kube.condition(*SQUATTER, conflicts.CONFLICT)["status"] == "True"
    edited = copy.deepcopy(SQUATTING)
    edited["balancing"] = {"intervalSeconds": 7}
    kube.set_spec(*SQUATTER, edited)
    mine = copy.deepcopy(SPEC)
    mine["balancing"] = {"intervalSeconds": 9}
    kube.set_spec(*VICTIM, mine)
    cluster.deliver()
    kept = await cycle(cache, VICTIM, conflicts.UNBOUND, now=110)
    assert all(e.reason != conflicts.REASON_SHARED for e in kept.decision.events)
    assert kube.condition(*VICTIM, "Ready")["status"] == "True"
    cluster.deliver()
    again = await cycle(cache, SQUATTER, conflicts.UNBOUND, now=111)
    assert again.decision.epochs is None
    assert kube.condition(*SQUATTER, conflicts.CONFLICT)["status"] == "True"
