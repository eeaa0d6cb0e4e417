"""What an autoscaler on ``ehb_recommended_replicas`` sees while something is broken, through
`cycles.run_cycle` over the in-memory ports (docs/scale.md, "What the autoscaler sees in a
fault"): the hub's end grows while the checkpoints stand still, and more pods cannot help."""

from __future__ import annotations

from eventhub_balancer.contracts import configmaps, partitionreports
from eventhub_balancer.handlers import memories, metrics
from tests.handlers import test_cycles
from tests.handlers.test_cycles import NAME, NS, make_kube
from tests.support import fakes

#: Events each partition's end grows by between two cycles (10 s apart) while nothing
#: checkpoints them: left to count, 19 cycles ask for every partition's pod.
GROWTH = 1_000


def recommended(registry: metrics.Metrics) -> float | None:
    return registry.registry.get_sample_value(
        "ehb_recommended_replicas", {"namespace": NS, "consumer": NAME}
    )


def report(kube: fakes.FakeKube, pod: str, state: partitionreports.ReportState, *only: str) -> None:
    """What the pod's runtime writes when the partitions it holds (``only`` those) are in
    ``state``; no partition at all clears its reports."""
    cm = kube.configmap_of(NS, pod)
    reports = {
        p: partitionreports.PartitionReport(
            partition=p, epoch=epoch, state=state, attempts=3, error="ClientAuthenticationError"
        )
        for p, (epoch, _state) in kube.assignment(NS)[pod].items()
        if not only or p in only
    }
    cm["metadata"].setdefault("annotations", {})[configmaps.ANNOTATION_PARTITION_REPORTS] = (
        partitionreports.build(reports)
    )


async def settled(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, memory: memories.Memory, registry: metrics.Metrics
) -> float:
    """a and b own the 4 partitions, 1,500 events behind in all (a figure of 2, the two pods
    that run), read beside the store's probe at 60 s. Returns the time after."""
    hubs.last_sequences = dict.fromkeys(hubs.ids, 1_000)
    hubs.store.blobs = {"0": (1, -1), "1": (1, 500), "2": (1, 1_000), "3": (1, 1_000)}
    for now in range(0, 80, 10):
        await test_cycles.cycle(kube, hubs, memory, now=now, registry=registry)
    assert recommended(registry) == 2
    return 80.0


async def grow(
    kube: fakes.FakeKube,
    hubs: fakes.FakeHubs,
    memory: memories.Memory,
    registry: metrics.Metrics,
    *,
    start: float,
    cycles: int,
    moving: tuple[str, ...] = (),
) -> list[float | None]:
    """Cycles every 10 s while each partition's end grows by `GROWTH`; the ``moving``
    partitions' checkpoints keep up with it (their pods process them). The figure after each."""
    seen: list[float | None] = []
    for i in range(cycles):
        hubs.last_sequences = {p: s + GROWTH for p, s in hubs.last_sequences.items()}
        for p in moving:
            hubs.store.blobs[p] = (hubs.store.blobs[p][0], hubs.last_sequences[p])
        await test_cycles.cycle(kube, hubs, memory, now=start + 10 * i, registry=registry)
        seen.append(recommended(registry))
    return seen


async def test_every_partition_failing_holds_the_pods_that_hold_them() -> None:
    """The pods' Event Hubs key is wrong (or Event Hubs does not answer them) while the
    operator reads the hub and the store: every partition is reported failing, the hub's end
    grows and no checkpoint moves. Counted as a backlog, that asked the autoscaler for every
    partition's pod within two minutes: pods that fail as the others do, each costing a
    hand-off. The figure holds the pods that hold the failing partitions, and follows the
    backlog again once the pods process (their reports gone)."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    registry, memory = metrics.Metrics(), memories.Memory()
    now = await settled(kube, hubs, memory, registry)
    for pod in ("a", "b"):
        report(kube, pod, "failing")
    seen = await grow(kube, hubs, memory, registry, start=now, cycles=19)
    assert seen == [2] * 19
    assert kube.status(NS, NAME)["failingCount"] == 4
    # The key is fixed: the pods process again and report nothing; the backlog is real now.
    for pod in ("a", "b"):
        report(kube, pod, "failing", "none")
    seen = await grow(kube, hubs, memory, registry, start=now + 190, cycles=7)
    assert seen[-1] == len(hubs.ids)


async def test_a_parked_partition_asks_for_no_more_pods() -> None:
    """``onFailure: park`` stopped partition 0 at its checkpoint, and the others keep up:
    more pods do not move a parked partition, yet its growing backlog asked for every
    partition's pod. The figure is the other partitions' backlog, and at least the pod that
    holds the parked one."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    registry, memory = metrics.Metrics(), memories.Memory()
    now = await settled(kube, hubs, memory, registry)
    (holder,) = [pod for pod, held in kube.assignment(NS).items() if "0" in held]
    report(kube, holder, "parked", "0")
    seen = await grow(kube, hubs, memory, registry, start=now, cycles=19, moving=("1", "2", "3"))
    assert seen[-1] == 1
    assert all(n is not None and n <= 2 for n in seen)
    assert kube.condition(NS, NAME, "PartitionsFailing")["reason"] == "PartitionsParked"


async def test_a_paused_consumer_holds_the_figure() -> None:
    """``spec.paused`` leaves every partition unowned on purpose, so the backlog grows on all
    of them: that asked for every partition's pod during the pause, each one getting nothing.
    The figure holds the last one read before the pause."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    registry, memory = metrics.Metrics(), memories.Memory()
    now = await settled(kube, hubs, memory, registry)
    kube.add_consumer(NS, NAME, {**test_cycles.SPEC, "paused": True})
    for pod in ("a", "b"):
        kube.release_all(NS, pod)
    seen = await grow(kube, hubs, memory, registry, start=now, cycles=19)
    assert kube.condition(NS, NAME, "Paused")["status"] == "True"
    assert seen == [2] * 19
    # An operator started during the pause (no figure kept): the pods that run, not 1.
    restarted = metrics.Metrics()
    seen = await grow(kube, hubs, memories.Memory(), restarted, start=now + 190, cycles=8)
    assert seen == [2] * 8


async def test_an_invalid_spec_holds_the_figure() -> None:
    """A spec edited into an invalid one decides nothing (Ready False, ``InvalidSpec``), so no
    cycle sets the figure: it stays what it was while the backlog grows, and the pods stay.
    A ``Conflict`` is refused the same way (`refusals`), with no figures either."""
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    registry, memory = metrics.Metrics(), memories.Memory()
    now = await settled(kube, hubs, memory, registry)
    kube.add_consumer(NS, NAME, {**test_cycles.SPEC, "selector": {"matchLabels": {}}})
    seen = await grow(kube, hubs, memory, registry, start=now, cycles=19)
    assert kube.condition(NS, NAME, "Ready")["reason"] == "InvalidSpec"
    assert seen == [2] * 19
