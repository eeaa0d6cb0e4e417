"""A consumer Deployment scaled to zero by its autoscaler (KEDA ``minReplicaCount: 0``) and
back, through `cycles.run_cycle` over the in-memory ports: what the status and the metrics say
at zero, and what the first pod back gets (docs/operations.md, "Scaling to zero")."""

from __future__ import annotations

from eventhub_balancer.handlers import memories, metrics
from eventhub_balancer.reconciling import progress
from tests.handlers import test_cycles
from tests.handlers.test_cycles import NAME, NS, SPEC, at, make_kube
from tests.support import fakes


def reason(kube: fakes.FakeKube, type_: str) -> tuple[str, str]:
    c = kube.condition(NS, NAME, type_)
    return c["status"], c["reason"]


async def scaled_to_zero(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, memory: memories.Memory, registry: metrics.Metrics
) -> float:
    """a and b own the 4 partitions, then both are deleted at once, each releasing what it
    holds (SIGTERM) before it goes; the cycles that follow. Returns the time after them."""
    await test_cycles.cycle(kube, hubs, memory, now=0, registry=registry)
    for pod in ("a", "b"):
        kube.terminate(NS, pod, at=at(10))
        kube.release_all(NS, pod)
    await test_cycles.cycle(kube, hubs, memory, now=10, registry=registry)
    for pod in ("a", "b"):
        kube.remove_pod(NS, pod)
    for now in (11, 20, 80, 140):
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    return 140


async def test_a_consumer_scaled_to_zero_reads_as_settled_not_as_a_wrong_selector() -> None:
    """At zero pods with nothing waiting, the consumer is as its autoscaler wants it: Ready
    said NoPods ("fix the selector or the pods' labels") and Reconciling stayed True, so Argo
    CD showed it Progressing and Flux InProgress for as long as it stayed at zero, and
    EventHubConsumerNotReady fired after 15 minutes."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.last_sequences = dict.fromkeys(hubs.ids, 99)
    hubs.store.blobs = {p: (1, 99) for p in hubs.ids}  # every event processed
    registry = metrics.Metrics()
    memory = memories.Memory()
    await scaled_to_zero(kube, hubs, memory, registry)
    assert kube.status(NS, NAME)["memberCount"] == 0
    assert reason(kube, "Ready") == ("True", "ScaledToZero")
    assert reason(kube, "Balanced") == ("True", "ScaledToZero")
    # The operator cannot tell who scaled: `kubectl scale` read "by the autoscaler".
    assert kube.condition(NS, NAME, "Ready")["message"] == (
        "no pod runs and no event waits: scaled to zero (by an autoscaler or by hand); the "
        "pods that come back share every partition, each taking its share once Ready"
    )
    assert reason(kube, progress.RECONCILING) == ("False", "Settled")
    assert reason(kube, progress.STALLED) == ("False", "NoStandingFault")
    sample = registry.registry.get_sample_value(
        "ehb_ready", {"namespace": NS, "consumer": NAME, "reason": "ScaledToZero"}
    )
    assert sample == 1


async def test_events_waiting_at_zero_make_ready_false_until_a_pod_is_back() -> None:
    """Events that arrive at zero are read as the backlog (at least once a minute): Ready turns
    False, still ScaledToZero, so that an autoscaler that never brings a pod back is seen. The
    first pod back gets every partition in the cycle that finds it Ready."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.last_sequences = dict.fromkeys(hubs.ids, 99)
    hubs.store.blobs = {p: (1, 99) for p in hubs.ids}
    registry = metrics.Metrics()
    memory = memories.Memory()
    now = await scaled_to_zero(kube, hubs, memory, registry)
    assert reason(kube, "Ready") == ("True", "ScaledToZero")
    hubs.last_sequences = dict.fromkeys(hubs.ids, 149)  # 50 new events on each partition
    for _ in range(8):
        now += 10
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    assert reason(kube, "Ready") == ("False", "ScaledToZero")
    assert "200 events wait" in kube.condition(NS, NAME, "Ready")["message"]
    assert reason(kube, progress.RECONCILING) == ("True", "ScaledToZero")
    assert reason(kube, progress.STALLED) == ("False", "NoStandingFault")
    now += 10  # a cycle that reads no backlog keeps what the last read said
    await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    assert reason(kube, "Ready") == ("False", "ScaledToZero")

    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(now))
    await test_cycles.cycle(kube, hubs, memory, now=now + 1, registry=registry)
    (held,) = kube.assignment(NS).values()
    assert list(kube.assignment(NS)) == ["c"]
    assert sorted(held) == sorted(hubs.ids)
    assert {state for _epoch, state in held.values()} == {"owned"}
    assert reason(kube, "Ready") == ("True", "AllPartitionsOwned")


async def test_a_selector_that_matches_no_pod_still_says_no_pods() -> None:
    """A spec whose selector matches none of the pods that run is a mistake, not a scale-in:
    the new generation finds no pod although pods ran under the old one."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await test_cycles.cycle(kube, hubs, memory, now=0)
    kube.set_spec(NS, NAME, {**SPEC, "selector": {"matchLabels": {"app": "typo"}}})
    for now in (5, 10, 70):
        await test_cycles.cycle(kube, hubs, memory, now=now)
        assert reason(kube, "Ready") == ("False", "NoPods")


async def test_a_consumer_whose_selector_never_matched_says_no_pods() -> None:
    kube = make_kube()
    kube.set_spec(NS, NAME, {**SPEC, "selector": {"matchLabels": {"app": "typo"}}})
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    for now in (0, 5, 65):
        await test_cycles.cycle(kube, hubs, memory, now=now)
        assert reason(kube, "Ready") == ("False", "NoPods")


async def test_partitions_released_by_the_last_pods_are_no_warning() -> None:
    """Every pod scaled away released its partitions, as it should: nothing is wrong, and a
    consumer that KEDA takes to zero whenever it idles posted a Warning per pod each time ("no
    Ready pod matches spec.selector"), beside Ready True ScaledToZero. A pod that stays but is
    not Ready leaves the partitions without an owner against the spec: that stays a Warning."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs.last_sequences = dict.fromkeys(hubs.ids, 99)
    hubs.store.blobs = {p: (1, 99) for p in hubs.ids}
    await scaled_to_zero(kube, hubs, memories.Memory(), metrics.Metrics())
    unassigned = [e for e in kube.events if e["reason"] == "PartitionUnassigned"]
    assert {e["type"] for e in unassigned} == {"Normal"}
    assert len(unassigned) == 2
    for e in unassigned:
        assert (
            "(released, the last it held) have no pod to go to: every pod spec.selector"
            in (e["message"])
        )
        assert "is stopping or gone (scaled to zero" in e["message"]

    kube = make_kube()
    memory = memories.Memory()
    await test_cycles.cycle(kube, hubs, memory, now=0)
    kube.set_ready(NS, "b", ready=False, since=at(5))  # crashing, say: it stays
    kube.terminate(NS, "a", at=at(10))
    kube.release_all(NS, "a")
    await test_cycles.cycle(kube, hubs, memory, now=10)
    (unowned,) = [e for e in kube.events if e["reason"] == "PartitionUnassigned"]
    assert unowned["type"] == "Warning"
    assert unowned["message"].endswith("no Ready pod matches spec.selector")
