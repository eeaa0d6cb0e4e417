"""A consumer pod on a node that stopped reaching the API server (lost, cut off).

The node lifecycle controller marks the pod's Ready condition False when the node's Lease
runs out (about 50 s after its last renewal: ``--node-monitor-grace-period``), and the
taint-eviction controller deletes it once its toleration of ``node.kubernetes.io/unreachable``
is over. Nobody confirms that deletion (the node's kubelet cannot), so the pod stays
Terminating, and it never gets the SIGTERM on which a consumer releases its partitions.
These are the control plane's writes, played on the fakes as kube-controller-manager made
them on the real control plane (Ready False with ContainersReady still True, then a
deletionTimestamp).
"""

from __future__ import annotations

from eventhub_balancer.contracts import timestamps
from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, at, cycle, make_kube
from tests.support import fakes


def lose_node(kube: fakes.FakeKube, pod: str, *, at_s: float) -> None:
    """What the node lifecycle controller writes: Ready False, the containers still ready."""
    body = kube._get("pod", NS, pod)
    stamp = timestamps.format_time(at(at_s))
    body["status"]["conditions"] = [
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": stamp},
        {"type": "Ready", "status": "False", "lastTransitionTime": stamp},
    ]
    body["status"]["containerStatuses"] = [
        {"name": "consumer", "ready": True, "state": {"running": {"startedAt": stamp}}}
    ]
    kube._store("pod", NS, body)


def evict(kube: fakes.FakeKube, pod: str, *, at_s: float, grace: int = 30) -> None:
    """What the taint-eviction controller does: a deletion with the pod's grace period."""
    body = kube._get("pod", NS, pod)
    body["metadata"]["deletionTimestamp"] = timestamps.format_time(at(at_s + grace))
    body["metadata"]["deletionGracePeriodSeconds"] = grace
    kube._store("pod", NS, body)


async def settled(kube: fakes.FakeKube, hubs: fakes.FakeHubs) -> memories.Memory:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.acknowledge(NS, pod)
    await cycle(kube, hubs, memory, now=1)
    assert set(kube.assignment(NS)["b"]) == {"2", "3"}
    return memory


async def test_a_pod_evicted_from_a_lost_node_loses_its_partitions_at_the_end_of_its_grace() -> (
    None
):
    # The node went silent; 50 s later the pod was marked NotReady (10 s here), and evicted 5 s
    # after that (a toleration of 5 s, shorter than podGraceSeconds). The pod never releases:
    # its partitions move podGraceSeconds after it turned NotReady, as they do when it is not
    # evicted, not a release wait and a hand-off timeout after the eviction.
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await settled(kube, hubs)
    lose_node(kube, "b", at_s=10)
    await cycle(kube, hubs, memory, now=11)
    evict(kube, "b", at_s=15)
    for now in (15, 16, 18, 25, 29):
        await cycle(kube, hubs, memory, now=now)
        assert set(kube.assignment(NS)["a"]) == {"0", "1"}, now
    await cycle(kube, hubs, memory, now=30)
    owned = kube.assignment(NS)["a"]
    assert owned == {"0": (1, "owned"), "1": (1, "owned"), "2": (2, "owned"), "3": (2, "owned")}
    assert kube.condition(NS, NAME, "Ready")["reason"] == "AllPartitionsOwned"


async def test_a_pod_deleted_while_its_node_is_still_thought_ready_waits_for_the_hand_off() -> None:
    # Deleted before the control plane noticed the node was gone: the pod is Ready as far as
    # anyone knows, so its release is waited for, at most the release wait and the hand-off
    # timeout (2 s + 30 s), and then the next owner's epoch fences it out.
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await settled(kube, hubs)
    evict(kube, "b", at_s=10)
    for now in (10, 12, 20, 41):
        await cycle(kube, hubs, memory, now=now)
        assert set(kube.assignment(NS)["a"]) == {"0", "1"}, now
    await cycle(kube, hubs, memory, now=42)
    assert set(kube.assignment(NS)["a"]) == {"0", "1", "2", "3"}


async def test_a_pod_that_turned_not_ready_on_its_sigterm_still_gets_its_release_wait() -> None:
    # A live pod deleted: its kubelet sends SIGTERM and its readiness fails at once. That
    # NotReady began with the deletion, so the hand-off is waited for as usual.
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await settled(kube, hubs)
    evict(kube, "b", at_s=10)
    kube.set_ready(NS, "b", ready=False, since=at(10))
    for now in (10, 12, 31, 41):
        await cycle(kube, hubs, memory, now=now)
        assert set(kube.assignment(NS)["a"]) == {"0", "1"}, now
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=41.5)
    assert set(kube.assignment(NS)["a"]) == {"0", "1", "2", "3"}


def _moves(kube: fakes.FakeKube) -> list[str]:
    return [e["message"] for e in kube.events if e["reason"] == "PartitionTakenOver"]


async def test_while_a_not_ready_pod_keeps_its_partitions_ready_names_it_and_when_they_move() -> (
    None
):
    # kubectl describe during the grace: which pod holds what nobody processes, and when that
    # stops; Balanced does not count the NotReady pod's partitions as spread over Ready pods.
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await settled(kube, hubs)
    lose_node(kube, "b", at_s=10)
    await cycle(kube, hubs, memory, now=11)
    ready = kube.condition(NS, NAME, "Ready")
    assert ready["reason"] == "PartitionsWithoutReadyOwner"
    assert ready["message"] == (
        "2 of 4 partitions have no Ready owner yet: NotReady pod b holds 2 until "
        "2024-05-01T12:00:30Z, when podGraceSeconds (20 s) since it turned NotReady ends "
        "and they move to the Ready pods"
    )
    balanced = kube.condition(NS, NAME, "Balanced")
    assert balanced["message"] == (
        "2 partitions over 1 Ready pod; NotReady pod b holds 2 until 2024-05-01T12:00:30Z, "
        "when podGraceSeconds (20 s) since it turned NotReady ends and they move to the Ready "
        "pods"
    )
    # Evicted meanwhile: still named, with the same moment (its grace counts from NotReady).
    evict(kube, "b", at_s=15)
    await cycle(kube, hubs, memory, now=16)
    assert (
        "NotReady pod b holds 2 until 2024-05-01T12:00:30Z"
        in (kube.condition(NS, NAME, "Ready")["message"])
    )


async def test_the_take_over_from_an_evicted_pod_says_it_is_terminating_not_gone() -> None:
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await settled(kube, hubs)
    lose_node(kube, "b", at_s=10)
    await cycle(kube, hubs, memory, now=11)
    evict(kube, "b", at_s=15)
    for now in (15, 30):
        await cycle(kube, hubs, memory, now=now)
    assert _moves(kube) == [
        "Took over partitions 2-3 of b (terminating, NotReady for 20 s since before its "
        "deletion, past podGraceSeconds: its node may be lost) for a (epoch 2)"
    ]


async def test_the_take_over_from_a_pod_not_ready_too_long_says_so() -> None:
    # Its process hung, or its node lost and not evicted yet: the pod is still there.
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await settled(kube, hubs)
    kube.set_ready(NS, "b", ready=False, since=at(10))
    for now in (11, 30):
        await cycle(kube, hubs, memory, now=now)
    assert _moves(kube) == [
        "Took over partitions 2-3 of b (NotReady for 20 s, past podGraceSeconds) for a (epoch 2)"
    ]


async def test_the_take_over_from_a_pod_that_is_gone_says_gone() -> None:
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await settled(kube, hubs)
    kube.remove_pod(NS, "b")
    await cycle(kube, hubs, memory, now=5)
    assert _moves(kube) == ["Took over partitions 2-3 of b (gone) for a (epoch 2)"]
