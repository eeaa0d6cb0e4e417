"""A burst of joins over whole cycles: pods that exist but are not Ready yet count in the plan.

Walked with plain bodies (`bodies`): the pods of a scale-out are created NotReady and turn
Ready one per cycle, and each pod acknowledges its revocations before the next cycle.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from eventhub_balancer.reconciling import decisions, observations
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod

IDS = tuple(str(i) for i in range(12))


def _cycle(
    observation: observations.Observation, *, now: float, moved: Counter[str]
) -> tuple[observations.Observation, decisions.Decision]:
    """One cycle: decide (with the blobs when asked), write, and let every pod acknowledge."""
    observation, decision = bodies.decide_fully(observation, now=at(now))
    for m in decision.moves:
        if m.kind != "revoke" and m.source is not None and m.target is not None:
            moved[m.partition] += 1
    observation = bodies.applied(observation, decision)
    for name in {p["metadata"]["name"] for p in observation.pods}:
        observation = bodies.acknowledged(observation, name)
    return observation, decision


def _pending(name: str, *, node: str | None) -> dict[str, Any]:
    """A pod the scheduler has placed on ``node`` (None: not yet), its containers not started."""
    body = pod(name, ready=False)
    body["status"] = {"phase": "Pending"}
    if node is not None:
        body["spec"] = {"nodeName": node}
    return body


def test_pods_that_turn_ready_one_per_cycle_get_one_plan_and_no_partition_moves_twice() -> None:
    moved: Counter[str] = Counter()
    observation = bodies.observe(pods=[pod("a"), pod("b")], ids=IDS)
    observation, _ = _cycle(observation, now=0, moved=moved)
    assert bodies.assignment(observation) == {
        "a": {str(p): (1, "owned") for p in range(6)},
        "b": {str(p): (1, "owned") for p in range(6, 12)},
    }
    joining = ["c", "d", "e"]
    observation = bodies.with_pods(observation, *(pod(n, ready=False, since=10) for n in joining))
    observation, created = _cycle(observation, now=10, moved=moved)
    assert created.moves == ()
    balanced = bodies.condition(observation, "Balanced")
    assert balanced["reason"] == "PodsStarting"
    assert balanced["message"].startswith("3 pods are starting: their shares stay with")
    # The starting pods' grace ends at 30: the cycle comes back then, whatever happens.
    assert created.next_in == 20.0
    now = 10.0
    for name in joining:
        now += 0.3
        observation = bodies.with_pods(observation, pod(name, since=now))
        observation, _ = _cycle(observation, now=now, moved=moved)
        observation, _ = _cycle(observation, now=now + 0.1, moved=moved)
    _, last = _cycle(observation, now=now + 0.2, moved=moved)
    assert last.balanced
    # 12 over 5: a and b keep 3 each, and 6 moves, the lower bound, each partition once.
    assert sum(moved.values()) == 6
    assert max(moved.values()) == 1
    held = {name: len(ps) for name, ps in bodies.assignment(observation).items()}
    assert held == {"a": 3, "b": 3, "c": 2, "d": 2, "e": 2}


def test_only_pods_on_a_node_count_as_starting_and_only_for_the_grace_period() -> None:
    moved: Counter[str] = Counter()
    observation = bodies.observe(pods=[pod("a")], ids=IDS)
    observation, _ = _cycle(observation, now=0, moved=moved)
    observation = bodies.with_pods(
        observation,
        pod("b", since=10),
        _pending("c", node="node-1"),
        _pending("unschedulable", node=None),
    )
    # b is Ready; c is on a node and counts (created at 0, bodies.T0); the pod no node took
    # does not: 12 over a, b and c, so b gets 4 and c's 4 stay with a.
    observation, revoking = _cycle(observation, now=10, moved=moved)
    assert [(m.kind, m.target) for m in revoking.moves] == [("revoke", "b")] * 4
    assert not revoking.balanced
    observation, _ = _cycle(observation, now=10.1, moved=moved)
    held = {name: len(ps) for name, ps in bodies.assignment(observation).items()}
    assert held == {"a": 8, "b": 4, "c": 0, "unschedulable": 0}
    # c was created at 0 and is still not Ready at podGraceSeconds: a and b share everything.
    observation, late = _cycle(observation, now=20, moved=moved)
    assert [(m.kind, m.target) for m in late.moves] == [("revoke", "b")] * 2
    observation, _ = _cycle(observation, now=20.1, moved=moved)
    held = {name: len(ps) for name, ps in bodies.assignment(observation).items()}
    assert held == {"a": 6, "b": 6, "c": 0, "unschedulable": 0}


def test_one_starting_pod_is_said_in_the_singular() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")], ids=IDS)
    observation, _ = _cycle(observation, now=0, moved=Counter())
    observation = bodies.with_pods(observation, pod("c", ready=False, since=10))
    observation, _ = _cycle(observation, now=10, moved=Counter())
    assert bodies.condition(observation, "Balanced")["message"] == (
        "1 pod is starting: its share stays with the current owners until Ready, for at most "
        "podGraceSeconds after coming up, or after the first pod Ready since then"
    )


def _first_ready_pod_keeps_its_share(observation: observations.Observation, now: float) -> None:
    """c turns Ready at ``now`` while d, created with it, still starts: c takes its share, d's
    waits for it, and no partition passes through c on its way to d."""
    moved: Counter[str] = Counter()
    observation = bodies.with_pods(
        observation, pod("c", since=now), pod("d", ready=False, since=now - 0.5)
    )
    observation, first = _cycle(observation, now=now, moved=moved)
    assert {m.target for m in first.moves} == {"c"}
    assert {name: len(ps) for name, ps in bodies.assignment(observation).items()} == {
        "c": 6,
        "d": 0,
    }
    assert bodies.condition(observation, "Balanced")["reason"] == "PodsStarting"
    observation = bodies.with_pods(observation, pod("d", since=now + 0.3))
    observation, _ = _cycle(observation, now=now + 0.3, moved=moved)
    _, last = _cycle(observation, now=now + 0.4, moved=moved)
    assert last.balanced
    assert not moved, "a partition went from c to d"
    held = {name: len(ps) for name, ps in bodies.assignment(observation).items()}
    assert held == {"c": 6, "d": 6}


def test_a_scale_up_from_zero_gives_the_first_ready_pod_its_share_only() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")], ids=IDS)
    observation, _ = _cycle(observation, now=0, moved=Counter())
    # Scaled to zero: the pods are gone, and with them their ConfigMaps (each pod owns its
    # own); every partition keeps its epoch on an ownerless entry.
    observation = dataclasses.replace(observation, pods=(), configmaps=())
    observation, _ = _cycle(observation, now=10, moved=Counter())
    assert bodies.condition(observation, "Balanced")["reason"] == "ScaledToZero"
    _first_ready_pod_keeps_its_share(observation, now=30)


def test_a_new_consumer_over_earlier_checkpoints_gives_the_first_ready_pod_its_share_only() -> None:
    # An earlier consumer of the same group left checkpoints at epoch 3: every partition is
    # ownerless above them, and no pod processes any.
    checkpoints = {p: (3, 50) for p in IDS}
    observation = bodies.observe(pods=[], ids=IDS, checkpoints=checkpoints)
    _first_ready_pod_keeps_its_share(observation, now=30)


def test_pods_slower_to_start_than_the_grace_period_join_as_one_burst() -> None:
    # Spark pods: c and d come up NotReady at 10 and turn Ready 40 s later, a moment apart,
    # well past podGraceSeconds (20 s) since they came up.
    moved: Counter[str] = Counter()
    observation = bodies.observe(pods=[pod("a"), pod("b")], ids=IDS)
    observation, _ = _cycle(observation, now=0, moved=moved)
    observation = bodies.with_pods(observation, pod("c", since=50), pod("d", ready=False, since=10))
    observation, _ = _cycle(observation, now=50, moved=moved)
    observation, _ = _cycle(observation, now=50.1, moved=moved)
    # d still counts, from c's Ready at 50: c took its own share, and d's stays with a and b
    # until d is Ready, or until 70, when the cycle comes back.
    assert {name: len(ps) for name, ps in bodies.assignment(observation).items()} == {
        "a": 4,
        "b": 5,
        "c": 3,
        "d": 0,
    }
    assert bodies.condition(observation, "Balanced")["reason"] == "PodsStarting"
    for name in ("a", "b", "c"):
        observation = bodies.applying(observation, name)
    steady = bodies.decide(observation, now=at(50.2))
    assert steady.next_in == pytest.approx(19.8)
    assert steady.settled_until == at(70).timestamp()
    # Were d never Ready: at 70 its share goes to the Ready pods.
    assert bodies.decide(observation, now=at(69.9)).moves == ()
    late = bodies.decide(observation, now=at(70))
    assert [(m.kind, m.source, m.target) for m in late.moves] == [("revoke", "b", "c")]
    observation = bodies.with_pods(observation, pod("d", since=50.3))
    observation, _ = _cycle(observation, now=50.3, moved=moved)
    _, last = _cycle(observation, now=50.4, moved=moved)
    assert last.balanced
    # 12 over 4: a and b give up 3 each, the lower bound, each partition once.
    assert sum(moved.values()) == 6
    assert max(moved.values()) == 1
