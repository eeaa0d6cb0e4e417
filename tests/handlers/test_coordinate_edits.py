"""Edits of a running consumer's coordinates that land while a dependency fails, over the
in-memory ports (docs/failures.md, "A change to the spec's coordinates").

The operator backs off from a failing Event Hubs or checkpoint store. The backoff belongs to
what failed: a spec that points elsewhere is asked at once, in the cycle its new generation
wakes, so that a hub that answers is listed before the pods are moved to it. So do the SDK
ownership claims' ETags a probe keeps (another container's are no rewrite of these) and the
last checkpoints read (another hub's are no backlog of this one).

Time is the ``now`` each cycle is given.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import partitionreports, storeaddresses
from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, SPEC, T0, cycle, make_kube
from tests.handlers.test_pod_acknowledgements import annotate
from tests.support import fakes


class FailingHub(fakes.FakeHubs):
    """Event Hubs where the hub ``broken`` fails every listing with ``error``; the others
    answer."""

    def __init__(self, *, broken: str, error: errors.EventHubBalancerError) -> None:
        super().__init__(store=fakes.FakeCheckpointStore())
        self.broken: str | None = broken
        self.error = error

    async def partitions(self, **kwargs: Any) -> tuple[tuple[str, ...], bool]:
        if kwargs["eventhub_name"] == self.broken:
            self.listings.append(kwargs["now"])
            raise self.error
        return await super().partitions(**kwargs)


def with_hub(name: str) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["eventHub"]["name"] = name
    return spec


@pytest.mark.parametrize(
    "error",
    [
        errors.EventHubUnreachable("the hub 'orders' does not answer"),
        errors.EventHubNotFound("Event Hub 'orders' does not exist"),
    ],
    ids=["outage", "deleted"],
)
async def test_a_hub_edited_while_the_old_one_fails_is_listed_at_once(
    error: errors.EventHubBalancerError,
) -> None:
    """The hub fails (an outage, or it was deleted) and the operator backs off; the user moves
    the consumer to a hub with 2 partitions. That hub is listed in the cycle the edit wakes:
    the partitions it lacks leave the assignment then, not never (once every ConfigMap names
    the new hub, a shorter listing of it is taken for a wrong answer)."""
    kube = make_kube()
    hubs = FailingHub(broken="", error=error)
    hubs.hub_ids["payments"] = ("0", "1")
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    assert kube.assignment(NS) == {
        "a": {"0": (1, "owned"), "1": (1, "owned")},
        "b": {"2": (1, "owned"), "3": (1, "owned")},
    }
    hubs.broken = "orders"
    t = 5.0
    for _ in range(3):  # the backoff grows with each failed attempt
        await cycle(kube, hubs, memory, now=t)
        t = memory.hub.backoff.retry_at - T0.timestamp()
    assert memory.hub.fault is not None
    edited_at = t - 1  # within the backoff
    kube.set_spec(NS, NAME, with_hub("payments"))
    asked = len(hubs.listings)
    await cycle(kube, hubs, memory, now=edited_at)
    assert len(hubs.listings) == asked + 1  # the new hub is asked, not waited for
    assert kube.status(NS, NAME)["partitionCount"] == 2
    owned = {p for held in kube.assignment(NS).values() for p in held}
    assert owned == {"0", "1"}
    reachable = kube.condition(NS, NAME, "EventHubReachable")
    assert (reachable["status"], reachable["reason"]) == ("True", "PartitionsListed")


class Containers(fakes.FakeHubs):
    """A checkpoint store per container (``stores``), each failing on its own."""

    def __init__(self, stores: dict[str, fakes.FakeCheckpointStore]) -> None:
        super().__init__(store=stores["checkpoints"])
        self.stores = stores

    async def checkpoints(self, address: storeaddresses.StoreAddress) -> dict[str, tuple[int, int]]:
        return self.stores[address.container_name].read()

    async def ownership_claims(self, address: storeaddresses.StoreAddress) -> dict[str, str]:
        return self.stores[address.container_name].read_claims()


def with_container(name: str) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["checkpointStore"]["containerName"] = name
    return spec


async def running_beside_a_fenced_container() -> tuple[
    fakes.FakeCheckpointStore,
    fakes.FakeCheckpointStore,
    Containers,
    fakes.FakeKube,
    memories.Memory,
]:
    """A consumer at work on container ``checkpoints`` (old), and a container ``elsewhere``
    (new) whose blobs hold epoch 5 (an earlier consumer checkpointed there)."""
    old, new = fakes.FakeCheckpointStore(), fakes.FakeCheckpointStore()
    for p in ("0", "1", "2", "3"):
        new.fence(p, 5, sequence_number=100)
    hubs = Containers({"checkpoints": old, "elsewhere": new})
    kube = make_kube()
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    return old, new, hubs, kube, memory


async def test_a_container_edited_while_the_old_one_fails_is_read_for_the_new_epochs() -> None:
    """The checkpoint store fails and the operator backs off; the user moves the consumer to
    another container, whose blobs hold higher epochs (an earlier consumer checkpointed
    there). The new container is read in the cycle the edit wakes: each pod's new epoch is
    above its blob's, so that the pods' fences there succeed the first time."""
    old, new, hubs, kube, memory = await running_beside_a_fenced_container()
    old.failure = errors.CheckpointStoreUnreachable("the account does not answer")
    t = 5.0
    for _ in range(3):  # the probe and its retries fail, the backoff grows
        await cycle(kube, hubs, memory, now=t + 60)
        t = memory.store.backoff.retry_at - T0.timestamp() - 60
    assert memory.store.fault is not None
    kube.set_spec(NS, NAME, with_container("elsewhere"))
    await cycle(kube, hubs, memory, now=t + 59)  # within the backoff
    assert new.reads  # the new container is read, not waited for
    assert kube.status(NS, NAME)["epochs"] == {"0": 6, "1": 6, "2": 6, "3": 6}
    assert kube.assignment(NS) == {
        "a": {"0": (6, "owned"), "1": (6, "owned")},
        "b": {"2": (6, "owned"), "3": (6, "owned")},
    }
    reachable = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert reachable["status"] == "True"


async def test_a_container_edited_back_and_forth_is_no_processor_beside_the_pods() -> None:
    """Both containers hold the ownership claims an SDK processor left when it was stopped
    (a migration). The user moves the consumer to the other container and back within two
    minutes: each probe lists another container's claims, not claims rewritten, and no
    ForeignProcessorRunning is said."""
    old, new = fakes.FakeCheckpointStore(), fakes.FakeCheckpointStore()
    old.claims = {p: f'"0x1{p}"' for p in ("0", "1", "2", "3")}
    new.claims = {p: f'"0x2{p}"' for p in ("0", "1", "2", "3")}
    hubs = Containers({"checkpoints": old, "elsewhere": new})
    kube = make_kube()
    memory = memories.Memory()
    for start, spec in ((0, SPEC), (70, with_container("elsewhere")), (140, SPEC)):
        kube.set_spec(NS, NAME, spec)
        for t in range(start, start + 70, 5):  # past the next probe (once a minute)
            await cycle(kube, hubs, memory, now=t)
            for pod in ("a", "b"):
                kube.apply_generation(NS, pod)
    assert len(old.claim_reads) >= 2
    assert len(new.claim_reads) >= 1
    reachable = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (reachable["status"], reachable["reason"]) == ("True", "CheckpointsListed")
    assert [e["reason"] for e in kube.events if e["type"] == "Warning"] == []


def owners(kube: fakes.FakeKube) -> dict[str, set[str]]:
    return {pod: set(held) for pod, held in kube.assignment(NS).items()}


async def test_another_hubs_checkpoints_are_no_lag_while_its_store_fails() -> None:
    """Weighting by lag plans on from the last checkpoints read while the store fails, but
    those of the old hub and container say nothing of the new hub's backlog: moved to
    another hub while the new container does not answer, the pods keep their partitions
    (planned by count), as in any store outage."""
    spec = copy.deepcopy(SPEC)
    spec["balancing"] = {"weighting": "lag"}
    old, new = fakes.FakeCheckpointStore(), fakes.FakeCheckpointStore()
    for p in ("0", "1", "2", "3"):
        old.fence(p, 1, sequence_number=100_000)
    hubs = Containers({"checkpoints": old, "elsewhere": new})
    hubs.last_sequences = {p: 100_000 for p in ("0", "1", "2", "3")}
    kube = make_kube()
    kube.set_spec(NS, NAME, spec)
    memory = memories.Memory()
    for t in (0, 5):
        await cycle(kube, hubs, memory, now=t)
        for pod in ("a", "b"):
            kube.apply_generation(NS, pod)
    before = owners(kube)
    moved = copy.deepcopy(spec)
    moved["eventHub"]["name"] = "payments"
    moved["checkpointStore"]["containerName"] = "elsewhere"
    new.failure = errors.CheckpointStoreUnreachable("the account does not answer")
    hubs.last_sequences = {"0": 200_000, "1": 10, "2": 10, "3": 10}  # payments' own numbers
    kube.set_spec(NS, NAME, moved)
    for t in range(10, 60, 5):
        await cycle(kube, hubs, memory, now=t)
        for pod in ("a", "b"):
            kube.apply_generation(NS, pod)
            kube.acknowledge(NS, pod)
    assert owners(kube) == before
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["status"] == "False"


async def test_blobs_lost_elsewhere_are_not_said_of_the_container_edited_in_while_down() -> None:
    """The status says the blobs of the old container are lost; the operator is down while
    the user moves the consumer to a new container (empty: nothing was ever lost there), and
    restarts. Its first listing there finds no blobs, which is no loss: what the status said
    was of the container the ConfigMaps still name."""
    old, new = fakes.FakeCheckpointStore(), fakes.FakeCheckpointStore()
    hubs = Containers({"checkpoints": old, "elsewhere": new})
    kube = make_kube()
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    for p in ("0", "1", "2", "3"):
        old.fence(p, 1, sequence_number=40)
    await cycle(kube, hubs, memory, now=61)  # the probe lists them
    old.blobs.clear()  # deleted by a lifecycle policy
    await cycle(kube, hubs, memory, now=130)
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["reason"] == "CheckpointsLost"
    kube.set_spec(NS, NAME, with_container("elsewhere"))  # while the operator is down
    await cycle(kube, hubs, memories.Memory(), now=200)  # the restarted operator
    assert new.reads
    reachable = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (reachable["status"], reachable["reason"]) == ("True", "CheckpointsListed")


async def test_a_container_edited_to_one_that_does_not_exist_is_not_said_readable() -> None:
    """A consumer with no pod yet (a newcomer's first one) is moved to a container that does
    not exist (a typo in containerName). No decision needs the blobs, so the store was left
    to its probe, a minute after the old container's listing: meanwhile the status said
    ``CheckpointsListed: container 'checkpoint' is readable`` of the container that is not
    there. The store the spec names now is read in the cycle the edit wakes."""
    old, typo = fakes.FakeCheckpointStore(), fakes.FakeCheckpointStore()
    typo.failure = errors.CheckpointContainerNotFound(
        "checkpoint container 'checkpoint' does not exist (HTTP 404 ContainerNotFound): "
        "create it, or fix checkpointStore.containerName"
    )
    hubs = Containers({"checkpoints": old, "checkpoint": typo})
    kube = make_kube()
    alone = copy.deepcopy(SPEC)
    alone["selector"] = {"matchLabels": {"app": "not-started-yet"}}
    kube.set_spec(NS, NAME, alone)
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    listed = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (listed["status"], listed["reason"]) == ("True", "CheckpointsListed")
    typo_spec = copy.deepcopy(alone)
    typo_spec["checkpointStore"]["containerName"] = "checkpoint"
    kube.set_spec(NS, NAME, typo_spec)
    await cycle(kube, hubs, memory, now=5)
    reachable = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (reachable["status"], reachable["reason"]) == ("False", "CheckpointStoreMisconfigured")
    assert "'checkpoint' does not exist" in reachable["message"]
    ready = kube.condition(NS, NAME, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "CheckpointStoreUnusable")


def report_lost(kube: fakes.FakeKube, store: fakes.FakeCheckpointStore) -> None:
    """What each pod does with its ConfigMap: it applies it, and reports lost every partition
    whose blob holds a higher epoch than the one it was given (its fence there is refused)."""
    for pod, held in kube.assignment(NS).items():
        lost = {
            p: partitionreports.PartitionReport(
                partition=p, epoch=e, state="lost", attempts=0, error="a higher epoch holds it"
            )
            for p, (e, _state) in held.items()
            if store.blobs.get(p, (0, 0))[0] > e
        }
        if lost:
            annotate(kube, pod, partitionreports.ANNOTATION, partitionreports.build(lost))
        kube.apply_generation(NS, pod)


async def test_a_container_edited_while_it_fails_raises_no_epoch_blind_for_lost_reports() -> None:
    """The consumer is moved to a container the operator cannot read (an outage, or only its
    own access fails), whose blobs hold epoch 5 (another consumer checkpointed there). The
    pods' fences at the raised epoch 2 are refused there and they report the partitions lost.
    Each report raised the epoch by one without the blobs, every 30 s while the store failed:
    3, 4, then 5, the very epoch the blobs hold, which a fence takes over from its writer.
    Now a lost partition waits for its blob: nothing is raised while the store fails, and once
    it answers each partition is given out above the blob's epoch, within the store's backoff."""
    _, new, hubs, kube, memory = await running_beside_a_fenced_container()
    new.failure = errors.CheckpointStoreUnreachable("the account does not answer")
    kube.set_spec(NS, NAME, with_container("elsewhere"))
    t = 5
    await cycle(kube, hubs, memory, now=t)
    assert kube.status(NS, NAME)["epochs"] == {"0": 2, "1": 2, "2": 2, "3": 2}
    while t < 300:  # five minutes of the store failing, a pod's report at every turn
        report_lost(kube, new)
        t += 10
        await cycle(kube, hubs, memory, now=t)
        assert kube.status(NS, NAME)["epochs"] == {"0": 2, "1": 2, "2": 2, "3": 2}, t
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["status"] == "False"
    new.failure = None
    back = t
    while any(e <= 5 for held in kube.assignment(NS).values() for e, _s in held.values()):
        assert t < back + 6 * 60, "not given out above the blobs within the store's backoff"
        report_lost(kube, new)
        t += 10
        await cycle(kube, hubs, memory, now=t)
    assert kube.status(NS, NAME)["epochs"] == {"0": 6, "1": 6, "2": 6, "3": 6}
    assert owners(kube) == {"a": {"0", "1"}, "b": {"2", "3"}}
