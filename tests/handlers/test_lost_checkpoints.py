"""Checkpoint blobs deleted under a running consumer (by hand, by a lifecycle policy, with a
container created again): the operator, which lists them when it gives partitions out and at
its store probe (once a minute), says so where users look, once per loss: a Warning Event
``CheckpointsLost`` and CheckpointStoreReachable False with that reason, naming the
partitions and where a new owner starts (spec.startPosition); the Normal Event when the
blobs are back. Its own epochs stay above every one it gave out (``status.epochs`` is the
floor when the blobs are gone). On fake time (looptime), over the in-memory fakes."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, SPEC, at, cycle, make_kube
from tests.support import fakes

pytestmark = pytest.mark.looptime


def lost_events(kube: fakes.FakeKube) -> list[dict[str, Any]]:
    return [e for e in kube.events if e["reason"] == "CheckpointsLost"]


async def steady(kube: fakes.FakeKube, hubs: fakes.FakeHubs) -> memories.Memory:
    """a: 0, 1 and b: 2, 3 at epoch 1, each fenced and checkpointed; listed by the probe."""
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for pod in ("a", "b"):
        kube.apply_generation(NS, pod)
    for partition in "0123":
        hubs.store.fence(partition, 1, sequence_number=40)
    await cycle(kube, hubs, memory, now=61)  # the store's probe lists them
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["reason"] == "CheckpointsListed"
    return memory


async def test_blobs_gone_under_a_move_are_told_once_and_their_return_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    kube = make_kube()
    kube.set_spec(NS, NAME, {**SPEC, "startPosition": "latest"})
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await steady(kube, hubs)
    hubs.store.blobs.clear()  # the container deleted and created again, empty
    kube.terminate(NS, "b", at=at(70))
    await cycle(kube, hubs, memory, now=70)
    kube.release_all(NS, "b")
    await cycle(kube, hubs, memory, now=71)
    # The operator's own epochs stay the floor: 2 and 3 go to a above the epoch b had.
    assert kube.assignment(NS)["a"] == {
        "0": (1, "owned"),
        "1": (1, "owned"),
        "2": (2, "owned"),
        "3": (2, "owned"),
    }
    (event,) = lost_events(kube)
    assert event["type"] == "Warning"
    assert "partitions 0-3" in event["message"], event["message"]
    skipped = "spec.startPosition (latest: the events since the lost checkpoint are skipped)"
    assert skipped in event["message"], event["message"]
    store = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (store["status"], store["reason"]) == ("False", "CheckpointsLost")
    assert "partitions 0-3" in store["message"]
    assert kube.condition(NS, NAME, "Ready")["status"] == "True"  # the pods go on processing
    for now in range(72, 400, 30):  # five probes: no Event again while nothing changes
        await cycle(kube, hubs, memory, now=now)
    assert len(lost_events(kube)) == 1
    # No reader logs what the decision found: the cycle says it, once.
    told = [r for r in caplog.records if "CheckpointsLost" in r.getMessage()]
    assert [r.levelno for r in told] == [logging.WARNING], [r.getMessage() for r in told]
    for partition in "0123":  # a fences 2 and 3, and checkpoints 0 and 1 again
        hubs.store.fence(partition, 2 if partition in "23" else 1, sequence_number=50)
    for now in range(400, 470, 30):
        await cycle(kube, hubs, memory, now=now)
    store = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (store["status"], store["reason"]) == ("True", "CheckpointsListed")
    assert kube.events[-1]["reason"] == "CheckpointStoreReachable", kube.events[-1]
    del hubs.store.blobs["3"]  # gone again: told again
    for now in range(470, 540, 30):
        await cycle(kube, hubs, memory, now=now)
    *_, again = lost_events(kube)
    assert len(lost_events(kube)) == 2
    assert "partition 3 " in again["message"], again["message"]


async def test_blobs_never_written_are_no_loss() -> None:
    # Owners given partitions that never fenced them (their pods not started yet) leave no
    # blob: a move then is no loss the operator can tell, and it says nothing.
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    kube.terminate(NS, "b", at=at(5))
    kube.release_all(NS, "b")
    for now in range(5, 200, 30):
        await cycle(kube, hubs, memory, now=now)
    assert set(kube.assignment(NS)["a"]) == {"0", "1", "2", "3"}
    assert lost_events(kube) == []
    assert kube.condition(NS, NAME, "CheckpointStoreReachable")["reason"] == "CheckpointsListed"


async def test_a_restarted_operator_keeps_saying_the_blobs_are_lost_without_a_new_event() -> None:
    kube = make_kube()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    memory = await steady(kube, hubs)
    hubs.store.blobs.clear()
    await cycle(kube, hubs, memory, now=130)  # the probe finds them gone
    assert len(lost_events(kube)) == 1
    restarted = memories.Memory()
    for now in range(200, 330, 30):
        await cycle(kube, hubs, restarted, now=now)
    store = kube.condition(NS, NAME, "CheckpointStoreReachable")
    assert (store["status"], store["reason"]) == ("False", "CheckpointsLost")
    assert len(lost_events(kube)) == 1
    again = "spec.startPosition (earliest: what the hub still holds is processed again)"
    assert again in store["message"], store["message"]
