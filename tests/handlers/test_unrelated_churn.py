"""Another tenant's EventHubConsumers, created, edited and deleted, leave a settled decision
standing: a cycle compares only the peers that could refuse its consumer.

Every consumer's settled decision was kept with the summaries of every EventHubConsumer of the
cluster, so any CR created or deleted anywhere, and any spec edit (which changes a summary's
standing, `conflicts.standing`), made every consumer's next cycle read its pods and decide
again: a tenant churning CRs of its own multiplied the operator's work for every other tenant.
A consumer's decision depends only on the consumers of its own namespace and on those of other
namespaces that name its checkpoint location (`conflicts.find`).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import cycles, memories
from eventhub_balancer.reconciling import conflicts, deciding
from tests.handlers import test_cycles
from tests.handlers.test_location_bindings import SPEC, VICTIM, Cluster, squatted
from tests.support import fakes

TENANT = ("tenant-b", "mirror")
#: Another tenant's consumer: its own hub, container and pods.
THEIRS: dict[str, Any] = copy.deepcopy(SPEC) | {"selector": {"matchLabels": {"app": "b"}}}
THEIRS["checkpointStore"]["containerName"] = "mirror"


class Victim:
    """The victim's cycles, with the memory its daemon keeps between them."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.memory = memories.Memory()
        self.hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())

    async def cycle(self, second: float) -> cycles.Result:
        cache = self.cluster.cache
        cache.following.follow(
            namespace=VICTIM[0], name=VICTIM[1], selector=specs.parse_spec(SPEC).selector
        )
        result = await cycles.run_cycle(
            kube=cache.view,
            hubs=self.hubs,
            namespace=VICTIM[0],
            name=VICTIM[1],
            memory=self.memory,
            now=test_cycles.at(second),
        )
        self.cluster.deliver()
        self.cluster.watch.deliver()
        return result


def decisions(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    taken: list[object] = []
    original = deciding.decide

    def decide(*args: Any, **kwargs: Any) -> Any:
        taken.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(deciding, "decide", decide)
    return taken


async def test_another_tenants_churn_leaves_a_settled_decision_standing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = squatted(squatter=False)
    victim = Victim(cluster)
    for second in range(10):
        result = await victim.cycle(second)
        if not result.writes:
            break
    await victim.cycle(10)
    assert victim.memory.settled is not None
    taken = decisions(monkeypatch)
    kube = cluster.kube
    # The other tenant creates a consumer, edits it twice, its status changes, it goes.
    kube.add_consumer(*TENANT, THEIRS)
    cluster.deliver()
    await victim.cycle(11)
    edited = copy.deepcopy(THEIRS)
    edited["balancing"] = {"intervalSeconds": 7}
    kube.set_spec(*TENANT, edited)
    cluster.deliver()
    await victim.cycle(12)
    await kube.patch_consumer_status(
        namespace=TENANT[0],
        name=TENANT[1],
        status={"observedGeneration": 2},
        resource_version=None,
    )
    cluster.deliver()
    await victim.cycle(13)
    edited["checkpointStore"]["containerName"] = "mirror-2"
    kube.set_spec(*TENANT, edited)
    cluster.deliver()
    await victim.cycle(14)
    kube._deleted("consumer", kube.objects.pop(("consumer", *TENANT)))
    cluster.deliver()
    await victim.cycle(15)
    assert taken == []  # every one of those cycles found the decision standing
    # One that names the victim's location is compared: the victim decides again (and holds).
    kube.add_consumer(*TENANT, SPEC | {"selector": {"matchLabels": {"app": "b"}}})
    cluster.deliver()
    result = await victim.cycle(16)
    assert len(taken) >= 1
    assert all(e.reason != conflicts.REASON_SHARED for e in result.decision.events)
