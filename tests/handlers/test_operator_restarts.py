"""The operator killed at every write of a cycle, and started again, over the in-memory ports.

A SIGKILL leaves what was written and nothing else: the writes before it landed, none after.
Each scenario runs once whole, then once per write, killed at that write: the writes of the
cycle from there on fail, and a new operator (a fresh `memories.Memory`, as a new process has)
carries on. The fake API server's own record of every write is then read: no (partition,
epoch) in two pods' ConfigMaps, `status.epochs` never lower, and the same owners and epochs at
the end as without the kill (an interrupted hand-off completed once, nothing moved twice).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import podassignments
from eventhub_balancer.handlers import cycles, memories
from tests.handlers import test_cycles
from tests.support import fakes

#: The consumer the cycle tests run (`tests.handlers.test_cycles`).
T0, NS, NAME, SPEC = test_cycles.T0, test_cycles.NS, test_cycles.NAME, test_cycles.SPEC
#: Cycles run after each change, at most (each 0.2 s after the last): enough to settle.
CYCLES_PER_STEP = 12


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


class Killed(errors.ApiUnavailable):
    """The operator process is gone: this write, and every later one of its cycle, never
    reach the API server."""


class KilledKube(fakes.FakeKube):
    """The API server, with an operator killed at its ``kill_at``-th write (Events aside)."""

    def __init__(self, kill_at: int | None) -> None:
        super().__init__()
        self.kill_at = kill_at
        self.landed = 0
        self.dying = False

    def _write(self, verb: str, kind: str, name: str) -> None:
        if kind != "event" and self.dying:
            raise Killed("the operator was killed")
        if kind != "event" and self.kill_at is not None and self.landed == self.kill_at:
            self.kill_at = None
            self.dying = True
            raise Killed("the operator was killed")
        super()._write(verb, kind, name)
        if kind != "event":
            self.landed += 1


Step = Callable[[fakes.FakeKube], None]


def nothing(kube: fakes.FakeKube) -> None:
    del kube


def join(kube: fakes.FakeKube) -> None:
    kube.add_pod(NS, "c", labels={"app": "c"}, since=at(10))


def gone(kube: fakes.FakeKube) -> None:
    kube.remove_pod(NS, "b")


def deleted(kube: fakes.FakeKube) -> None:
    kube.terminate(NS, "b", at=at(20))
    kube.release_all(NS, "b")


def unready(kube: fakes.FakeKube) -> None:
    kube.set_ready(NS, "b", ready=False, since=at(20))


SCENARIOS: dict[str, list[tuple[float, Step]]] = {
    "a join, by hand-off": [(0, nothing), (10, join)],
    "a join, then a pod gone": [(0, nothing), (10, join), (20, gone)],
    "a join, then a pod deleted": [(0, nothing), (10, join), (20, deleted)],
    "a pod NotReady past its grace": [(0, nothing), (20, unready)],
}


def pods_answer(kube: fakes.FakeKube, store: fakes.FakeCheckpointStore) -> None:
    """What each pod's runtime does once its ConfigMap changed: fence each partition it owns
    at its epoch in the checkpoint blob, release what is revoked, say it applied the
    generation."""
    for (kind, namespace, _), body in list(kube.objects.items()):
        if kind != "configmap":
            continue
        parsed = podassignments.parse_data(body.get("data") or {})
        if ("pod", namespace, parsed.pod) not in kube.objects:
            continue
        for pid, entry in parsed.partitions.items():
            if entry.state == "owned" and store.blobs.get(str(pid), (0, -1))[0] < entry.epoch:
                store.fence(str(pid), entry.epoch)
        if any(e.state == "revoking" for e in parsed.partitions.values()):
            kube.acknowledge(namespace, parsed.pod)
        kube.apply_generation(namespace, parsed.pod)


async def play(steps: list[tuple[float, Step]], *, kill_at: int | None) -> KilledKube:
    kube = KilledKube(kill_at)
    kube.add_consumer(NS, NAME, SPEC)
    kube.add_secret(
        NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
    )
    kube.add_secret(NS, "blob", {"cs": "UseDevelopmentStorage=true"})
    for pod in ("a", "b"):
        kube.add_pod(NS, pod, labels={"app": "c"}, since=T0)
    hubs = fakes.FakeHubs([str(p) for p in range(8)], store=fakes.FakeCheckpointStore())
    memory = memories.Memory()
    now = 0.0
    # After the last change, long enough for every grace and hand-off timeout to pass.
    for moment, step in [*steps, (steps[-1][0] + 40, nothing)]:
        step(kube)
        now = max(now, moment)
        for _ in range(CYCLES_PER_STEP):
            now += 0.2
            try:
                result = await cycles.run_cycle(
                    kube=kube, hubs=hubs, namespace=NS, name=NAME, memory=memory, now=at(now)
                )
            except Killed:
                kube.dying = False
                memory = memories.Memory()  # a new operator process
                pods_answer(kube, hubs.store)  # the pods go on meanwhile
                continue
            pods_answer(kube, hubs.store)
            if result.writes == 0:
                break
    return kube


def audit(kube: fakes.FakeKube) -> list[str]:
    """What the API server's record of every write shows of two owners or epochs going back."""
    found = []
    owners: dict[tuple[str, int], set[str]] = {}
    highest: dict[str, int] = {}
    for kind, body in kube.history:
        if kind == "configmap":
            parsed = podassignments.parse_data(body.get("data") or {})
            for pid, entry in parsed.partitions.items():
                owners.setdefault((str(pid), entry.epoch), set()).add(parsed.pod)
        elif kind == "consumer":
            epochs = (body.get("status") or {}).get("epochs") or {}
            found += [
                f"status.epochs of {pid} went from {epoch} to {epochs.get(pid)}"
                for pid, epoch in highest.items()
                if epochs.get(pid, -1) < epoch
            ]
            highest = dict(epochs)
    found += [
        f"{pid} at epoch {e} given to {sorted(p)}" for (pid, e), p in owners.items() if len(p) > 1
    ]
    return found


def outcome(kube: fakes.FakeKube) -> tuple[Any, Any]:
    return kube.assignment(NS), kube.status(NS, NAME).get("epochs")


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_an_operator_killed_at_any_write_hands_no_epoch_out_twice_and_moves_nothing_more(
    scenario: str,
) -> None:
    steps = SCENARIOS[scenario]
    whole = await play(steps, kill_at=None)
    assert audit(whole) == []
    expected = outcome(whole)
    assert whole.landed > 5
    for kill_at in range(whole.landed):
        killed = await play(steps, kill_at=kill_at)
        assert killed.kill_at is None, "the operator was killed"
        assert audit(killed) == [], f"killed at write {kill_at}"
        assert outcome(killed) == expected, f"killed at write {kill_at}"
