"""``spec.paused`` through `cycles.run_cycle` over the in-memory ports: a pause releases every
partition by ordered hand-off, the pods keep empty ConfigMaps, and a resume gives out higher
epochs."""

from __future__ import annotations

import pytest

from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, SPEC, cycle, make_kube
from tests.support import fakes


@pytest.fixture
def kube() -> fakes.FakeKube:
    return make_kube()


@pytest.fixture
def hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(store=fakes.FakeCheckpointStore())


def reasons(kube: fakes.FakeKube) -> list[str]:
    return [e["reason"] for e in kube.events]


async def test_a_pause_releases_everything_and_a_resume_assigns_again(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs
) -> None:
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)  # a: 0, 1; b: 2, 3 at epoch 1
    kube.set_spec(NS, NAME, {**SPEC, "paused": True})
    await cycle(kube, hubs, memory, now=5)
    assert kube.assignment(NS) == {
        "a": {"0": (1, "revoking"), "1": (1, "revoking")},
        "b": {"2": (1, "revoking"), "3": (1, "revoking")},
    }
    assert kube.condition(NS, NAME, "Paused")["status"] == "False"
    assert kube.condition(NS, NAME, "Paused")["reason"] == "Pausing"
    assert "Pausing" in reasons(kube)

    kube.acknowledge(NS, "a")
    kube.acknowledge(NS, "b")
    await cycle(kube, hubs, memory, now=6)
    assert kube.assignment(NS) == {"a": {}, "b": {}}  # the pods keep a ConfigMap, empty
    paused = kube.condition(NS, NAME, "Paused")
    assert (paused["status"], paused["reason"]) == ("True", "Paused")
    assert kube.condition(NS, NAME, "Ready")["reason"] == "Paused"
    assert kube.status(NS, NAME)["epochs"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert reasons(kube).count("Paused") == 1
    calls = len(kube.calls)
    assert (await cycle(kube, hubs, memory, now=11)).writes == 0  # a steady pause
    assert len(kube.calls) == calls

    kube.set_spec(NS, NAME, SPEC)
    await cycle(kube, hubs, memory, now=20)
    assert kube.assignment(NS) == {
        "a": {"0": (2, "owned"), "1": (2, "owned")},
        "b": {"2": (2, "owned"), "3": (2, "owned")},
    }
    resumed = kube.condition(NS, NAME, "Paused")
    assert (resumed["status"], resumed["reason"]) == ("False", "Resumed")
    assert reasons(kube).count("Resumed") == 1
