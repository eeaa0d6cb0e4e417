"""Cycles over the cache with EventHubConsumers of two namespaces naming one checkpoint
location: an older one elsewhere never stops this one, and the install's binding decides whose
the location is (`registering.Operator.bindings` reaches the decision through the cycle)."""

from __future__ import annotations

import copy
from typing import Any

from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import caching, cycles, indexkeys, memories
from eventhub_balancer.reconciling import conflicts
from tests.handlers import test_caching, test_conflicts, test_cycles
from tests.support import fakes, watches

VICTIM, SQUATTER = ("shop", "orders"), ("audit", "reader")
SPEC: dict[str, Any] = copy.deepcopy(test_cycles.SPEC) | {
    "checkpointStore": {
        "containerName": "checkpoints",
        "accountUrl": "https://shopcheckpoints.blob.core.windows.net",
        "credentials": {"workloadIdentity": {}},
    }
}


def squatted() -> tuple[fakes.FakeKube, caching.CachedKube]:
    """The victim's consumer (created at 60 s) and an older one in ``audit`` naming the same
    account, container, hub and group."""
    kube = test_cycles.make_kube()
    kube.set_spec(*VICTIM, SPEC)
    kube.add_consumer(*SQUATTER, SPEC | {"selector": {"matchLabels": {"app": "x"}}})
    for (ns, name), seconds in ((VICTIM, 60), (SQUATTER, 0)):
        meta = kube.objects["consumer", ns, name]["metadata"]
        meta["creationTimestamp"] = specs.format_time(test_cycles.at(seconds))
    cache = caching.CachedKube(kube, clock=test_caching.Clock())
    watch = watches.Watch(kube, cache)
    cache.attach({**watch.indexes, indexkeys.PEERS: test_conflicts.peers_index(kube)})
    return kube, cache


async def cycle(
    cache: caching.CachedKube, consumer: tuple[str, str], bindings: conflicts.Bindings
) -> cycles.Result:
    namespace, name = consumer
    cache.follow(namespace=namespace, name=name, selector=specs.parse_spec(SPEC).selector)
    return await cycles.run_cycle(
        kube=cache,
        hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()),
        namespace=namespace,
        name=name,
        memory=memories.Memory(),
        now=test_cycles.at(100),
        bindings=bindings,
    )


async def test_an_older_consumer_in_another_namespace_does_not_stop_the_victim() -> None:
    kube, cache = squatted()
    result = await cycle(cache, VICTIM, conflicts.UNBOUND)
    assert result.decision.epochs is not None
    assert sorted(kube.assignment(VICTIM[0])) == ["a", "b"]
    assert kube.condition(*VICTIM, "Ready")["status"] == "True"
    shared = kube.condition(*VICTIM, conflicts.SHARED)
    assert shared["status"] == "True"
    assert "audit/reader" in shared["message"]


async def test_a_binding_refuses_the_squatter_and_not_the_victim() -> None:
    kube, cache = squatted()
    bindings = conflicts.Bindings.of({"shopcheckpoints.blob.core.windows.net": "shop"})
    await cycle(cache, VICTIM, bindings)
    assert sorted(kube.assignment(VICTIM[0])) == ["a", "b"]
    refused = await cycle(cache, SQUATTER, bindings)
    assert refused.decision.epochs is None
    conflict = kube.condition(*SQUATTER, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", "LocationBound")
    assert "shop" not in conflict["message"].replace("shopcheckpoints", "")
