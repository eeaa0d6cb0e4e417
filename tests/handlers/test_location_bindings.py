"""Cycles over the cache with EventHubConsumers of two namespaces naming one checkpoint
location: the one that holds it (created first) keeps working and only the newcomer is
refused, naming the holder; an older squatter holds it until the install's binding decides
whose the location is (`registering.Operator.bindings` reaches the decision through the
cycle)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from eventhub_balancer.contracts import specs, timestamps
from eventhub_balancer.handlers import cycles, memories
from eventhub_balancer.handlers.cache import caches, shelves
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cluster:
    kube: fakes.FakeKube
    cache: caches.Cache
    watch: watches.Watch
    #: the peers index, which kopf files from the consumers' watch
    index: dict[Any, list[Any]]

    def deliver(self) -> None:
        """The consumers' watch events delivered, and the peers index filed again."""
        self.watch.deliver("consumer")
        self.index.clear()
        self.index.update(test_conflicts.peers_index(self.kube))


SQUATTING = SPEC | {"selector": {"matchLabels": {"app": "x"}}}


def squatted(*, squatter: bool = True) -> Cluster:
    """The victim's consumer (created at 60 s) and an older one in ``audit`` naming the same
    account, container, hub and group (or none yet: `squat` creates it)."""
    kube = test_cycles.make_kube()
    kube.set_spec(*VICTIM, SPEC)
    created(kube, VICTIM, 60)
    cache = caches.Cache(kube, clock=test_caching.Clock())
    watch = watches.Watch(kube, cache)
    index = test_conflicts.peers_index(kube)
    cache.following.attach({**watch.indexes, shelves.PEERS: index})
    cluster = Cluster(kube=kube, cache=cache, watch=watch, index=index)
    if squatter:
        squat(cluster)
    return cluster


def created(kube: fakes.FakeKube, consumer: tuple[str, str], seconds: float) -> None:
    """Its creationTimestamp, stored again so that the watch delivers it too."""
    body = kube.objects["consumer", *consumer]
    body["metadata"]["creationTimestamp"] = timestamps.format_time(test_cycles.at(seconds))
    kube.set_spec(*consumer, body["spec"])


def squat(cluster: Cluster, *, seconds: float = 0) -> None:
    cluster.kube.add_consumer(*SQUATTER, SQUATTING)
    created(cluster.kube, SQUATTER, seconds)
    cluster.deliver()


async def at_work(cluster: Cluster, consumer: tuple[str, str]) -> None:
    """The consumer's status says a decision over what it names now refused it nothing (it
    worked there before the other's check, or before a binding was lifted): its age then
    decides against another consumer at work (`conflicts.standing`)."""
    body = cluster.kube.objects["consumer", *consumer]
    await cluster.kube.patch_consumer_status(
        namespace=consumer[0],
        name=consumer[1],
        status={"observedGeneration": body["metadata"]["generation"]},
        resource_version=None,
    )
    cluster.deliver()


async def cycle(
    cache: caches.Cache,
    consumer: tuple[str, str],
    bindings: conflicts.Bindings,
    *,
    now: float = 100,
) -> cycles.Result:
    namespace, name = consumer
    cache.following.follow(namespace=namespace, name=name, selector=specs.parse_spec(SPEC).selector)
    return await cycles.run_cycle(
        kube=cache.view,
        hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()),
        namespace=namespace,
        name=name,
        memory=memories.Memory(),
        now=test_cycles.at(now),
        bindings=bindings,
    )


async def test_a_newcomer_naming_a_held_location_is_refused_and_the_holder_fails_over() -> None:
    """The attack: tenant B creates one CR naming A's location and selects no pods. A keeps
    balancing: when one of its pods dies, its partitions move at once."""
    cluster = squatted(squatter=False)
    kube, cache = cluster.kube, cluster.cache
    await cycle(cache, VICTIM, conflicts.UNBOUND)
    held = kube.assignment(VICTIM[0])
    assert sorted(held) == ["a", "b"]
    squat(cluster, seconds=90)
    refused = await cycle(cache, SQUATTER, conflicts.UNBOUND, now=110)
    assert (refused.decision.epochs, refused.decision.writes.count) == (None, 0)
    conflict = kube.condition(*SQUATTER, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", "LocationShared")
    assert "EventHubConsumer shop/orders in another namespace" in conflict["message"]
    assert "holds it" in conflict["message"]
    assert "--bind-location NS=shop.servicebus.windows.net" in conflict["message"]
    # Pod b dies; the holder hands its partitions to a at once.
    kube.remove_pod(VICTIM[0], "b")
    cluster.watch.deliver("pod")
    moved = await cycle(cache, VICTIM, conflicts.UNBOUND, now=120)
    assert moved.decision.writes.count > 0
    assert sorted(kube.assignment(VICTIM[0])) == ["a"]
    assert kube.condition(*VICTIM, "Ready")["status"] == "True"
    assert all(
        c["type"] != conflicts.CONFLICT for c in kube.status(*VICTIM).get("conditions") or []
    )


async def test_an_older_squatter_holds_until_it_moves_and_the_victim_keeps_its_pods() -> None:
    cluster = squatted(squatter=False)
    kube, cache = cluster.kube, cluster.cache
    await cycle(cache, VICTIM, conflicts.UNBOUND)
    held = kube.assignment(VICTIM[0])
    record = kube.status(*VICTIM)["assignment"]
    squat(cluster)  # created before the victim,
    await at_work(cluster, SQUATTER)  # and at work there as well
    refused = await cycle(cache, VICTIM, conflicts.UNBOUND, now=110)
    assert (refused.decision.epochs, refused.decision.writes.count) == (None, 0)
    assert kube.assignment(VICTIM[0]) == held  # the pods go on with what they hold
    assert kube.status(*VICTIM)["assignment"] == record
    conflict = kube.condition(*VICTIM, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", "LocationShared")
    assert "audit/reader" in conflict["message"]
    assert (
        "NS=shopcheckpoints.blob.core.windows.net, chart value locationBindings"
        in (conflict["message"])
    )
    assert kube.condition(*VICTIM, "Ready")["status"] == "False"
    holder = await cycle(cache, SQUATTER, conflicts.UNBOUND, now=110)
    assert all(e.reason != conflicts.REASON_SHARED for e in holder.decision.events)
    # The squatter names a container of its own: the victim works again, from its record.
    own = copy.deepcopy(SQUATTING)
    own["checkpointStore"]["containerName"] = "audit"
    kube.set_spec(*SQUATTER, own)
    cluster.deliver()
    await cycle(cache, VICTIM, conflicts.UNBOUND, now=120)
    assert kube.assignment(VICTIM[0]) == held
    cleared = kube.condition(*VICTIM, conflicts.CONFLICT)
    assert (cleared["status"], cleared["reason"]) == ("False", "NoConflict")
    assert kube.condition(*VICTIM, "Ready")["status"] == "True"


async def test_a_binding_decides_over_age() -> None:
    cluster = squatted()  # the squatter is the older
    kube, cache = cluster.kube, cluster.cache
    bindings = conflicts.Bindings.of({"shopcheckpoints.blob.core.windows.net": "shop"})
    await cycle(cache, VICTIM, bindings)
    assert sorted(kube.assignment(VICTIM[0])) == ["a", "b"]
    assert kube.condition(*VICTIM, "Ready")["status"] == "True"
    refused = await cycle(cache, SQUATTER, bindings)
    assert refused.decision.epochs is None
    conflict = kube.condition(*SQUATTER, conflicts.CONFLICT)
    assert (conflict["status"], conflict["reason"]) == ("True", "LocationBound")
    assert "shop" not in conflict["message"].replace("shopcheckpoints", "")
