"""One tenant's large hubs do not keep another tenant's backlog from being read.

The backlog probes of every consumer share `backlogs.READS_PER_SECOND` partition reads, and a
hub larger than the bucket reads once it is full, running it into debt. With one bucket for
the whole operator, a tenant probing three hubs of 1,024 partitions a minute kept it in debt
at every probe of another tenant's 4-partition hub, whose backlog (and so its
``ehb_recommended_replicas``) was then never read. Each tenant now draws on its share.
"""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer.contracts import startpositions
from eventhub_balancer.handlers import backlogs, cycles, memories
from tests.handlers.test_cycles import NAME, SPEC, T0, at
from tests.support import fakes


def tenant(namespace: str, partitions: int) -> tuple[fakes.FakeKube, fakes.FakeHubs]:
    """One consumer of two pods in ``namespace``, its hub of ``partitions``."""
    kube = fakes.FakeKube()
    kube.add_consumer(namespace, NAME, SPEC)
    kube.add_secret(
        namespace, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
    )
    kube.add_secret(namespace, "blob", {"cs": "UseDevelopmentStorage=true"})
    for pod in ("a", "b"):
        kube.add_pod(namespace, pod, labels={"app": "c"}, since=T0)
    hubs = fakes.FakeHubs([str(p) for p in range(partitions)], store=fakes.FakeCheckpointStore())
    return kube, hubs


async def test_a_small_hub_is_read_beside_another_tenants_large_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    budget = backlogs.Budget(clock=lambda: clock[0])
    # Tenant A: three hubs of 1,024 partitions, probed at 10, 30 and 50 s into each minute;
    # tenant B: one of 4, probed at 40 s.
    fleet = [(10.0, "noisy", *tenant("noisy", 1024)), (30.0, "noisy", *tenant("noisy", 1024))]
    fleet += [(50.0, "noisy", *tenant("noisy", 1024)), (40.0, "quiet", *tenant("quiet", 4))]
    memories_ = [memories.Memory() for _ in fleet]
    read: list[int] = []
    quiet_hubs = fleet[3][3]
    original = quiet_hubs.last_sequence_numbers

    async def ends(**kw: Any) -> dict[str, startpositions.PartitionBounds]:
        read.append(int(clock[0] // 60))
        return await original(**kw)

    monkeypatch.setattr(quiet_hubs, "last_sequence_numbers", ends)
    for minute in range(16):
        for (phase, namespace, kube, hubs), memory in zip(fleet, memories_, strict=True):
            clock[0] = minute * 60 + phase
            await cycles.run_cycle(
                kube=kube,
                hubs=hubs,
                namespace=namespace,
                name=NAME,
                memory=memory,
                now=at(clock[0]),
                backlog=budget,
            )
    # B's probes come each minute from the second (the first one lists the store only):
    # every one of them reads, however A's probes spend their share.
    assert read == list(range(1, 16)), read
