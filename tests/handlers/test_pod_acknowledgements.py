"""What a pod writes on its ConfigMap, through whole cycles over the fakes: a release written
ahead of the revocation does not end the hand-off, and a pod that reports every new epoch
lost raises it once per hold, not once per cycle."""

from __future__ import annotations

import datetime

from eventhub_balancer.contracts import configmaps, partitionreports
from eventhub_balancer.handlers import cycles, memories
from tests.handlers import test_cycles
from tests.support import fakes

T0, NS, NAME = test_cycles.T0, test_cycles.NS, test_cycles.NAME
SPEC = test_cycles.SPEC


def make_kube(*pods: str) -> fakes.FakeKube:
    kube = fakes.FakeKube()
    kube.add_consumer(NS, NAME, SPEC)
    kube.add_secret(
        NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
    )
    kube.add_secret(NS, "blob", {"cs": "UseDevelopmentStorage=true"})
    for name in pods:
        kube.add_pod(NS, name, labels={"app": "c"}, since=T0)
    return kube


async def cycle(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, memory: memories.Memory, *, now: float
) -> cycles.Result:
    return await cycles.run_cycle(
        kube=kube,
        hubs=hubs,
        namespace=NS,
        name=NAME,
        memory=memory,
        now=T0 + datetime.timedelta(seconds=now),
    )


def annotate(kube: fakes.FakeKube, pod: str, key: str, value: str) -> None:
    """What the pod writes on its own ConfigMap (the only thing it may write there)."""
    cm = kube.configmap_of(NS, pod)
    cm["metadata"].setdefault("annotations", {})[key] = value
    kube._store("configmap", NS, cm)


async def test_a_release_written_ahead_of_the_revocation_does_not_end_the_handoff() -> None:
    kube = make_kube("a", "b")
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        held = {p: e for p, (e, _s) in kube.assignment(NS)[pod].items()}
        annotate(kube, pod, configmaps.ANNOTATION_RELEASED, configmaps.build_released(held))
    kube.add_pod(NS, "c", labels={"app": "c"}, since=T0)
    await cycle(kube, hubs, memory, now=5)
    revoking = {
        p
        for parts in kube.assignment(NS).values()
        for p, (_e, s) in parts.items()
        if s == "revoking"
    }
    assert revoking
    for seconds in (6, 7, 8):
        await cycle(kube, hubs, memory, now=seconds)
    assert kube.assignment(NS).get("c", {}) == {}
    # Released after the revocation: the hand-off ends.
    for pod in ("a", "b"):
        kube.acknowledge(NS, pod)
    await cycle(kube, hubs, memory, now=9)
    assert set(kube.assignment(NS)["c"]) == revoking


async def test_a_pod_reporting_every_new_epoch_lost_does_not_churn_epochs() -> None:
    kube = make_kube("a")
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    rises = 0
    for step in range(1, 25):  # two minutes, a cycle every 5 s
        epoch = kube.assignment(NS)["a"]["0"][0]
        report = partitionreports.PartitionReport(
            partition="0", epoch=epoch, state="lost", attempts=0, error="taken"
        )
        annotate(kube, "a", partitionreports.ANNOTATION, partitionreports.build({"0": report}))
        await cycle(kube, hubs, memory, now=5.0 * step)
        rises += kube.assignment(NS)["a"]["0"][0] > epoch
    # Once for the first report, then at most once per hold: not once per cycle (24).
    assert 1 <= rises <= 5
