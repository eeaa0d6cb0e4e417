"""A rolling update read from the pods as a Deployment makes them: the ReplicaSet owner and
``pod-template-hash`` say which revision each pod runs, and the newest pod which revision
replaces the others.

A new revision's pod that turned Ready gets no revokes for its share while the pods it
replaces are there: the Deployment deletes one of them next, and its partitions go to the
new pod. Without that, each old pod handed one partition to the new pod and the deleted old
pod's partitions went partly to the other old pods (tests/planner/test_rollouts.py walks a
whole rollout; tests/realkube/wire/test_rollouts.py measures one on the real control plane).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from eventhub_balancer.contracts import podstates, timestamps
from eventhub_balancer.reconciling import decisions, observations
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod

IDS = tuple(str(i) for i in range(12))
GRACE = 20.0  # the CRD's podGraceSeconds


def revision_pod(
    name: str, template: str, *, created: float = 0.0, ready: bool = True, since: float = 0.0
) -> dict[str, Any]:
    body = pod(name, ready=ready, since=since, labels={"app": "c", "pod-template-hash": template})
    body["metadata"]["creationTimestamp"] = timestamps.format_time(at(created))
    body["metadata"]["ownerReferences"] = [
        {"kind": "ReplicaSet", "name": f"orders-{template}", "uid": template, "controller": True}
    ]
    return body


def terminating(body: dict[str, Any], *, since: float) -> dict[str, Any]:
    body = dict(body, metadata=dict(body["metadata"]))
    body["metadata"]["deletionTimestamp"] = timestamps.format_time(at(since + 30))
    body["metadata"]["deletionGracePeriodSeconds"] = 30
    return body


def _cycle(
    observation: observations.Observation, *, now: float, moved: Counter[str]
) -> tuple[observations.Observation, decisions.Decision]:
    observation, decision = bodies.decide_fully(observation, now=at(now))
    for m in decision.moves:
        if m.kind != "revoke" and m.source is not None and m.target is not None:
            moved[m.partition] += 1
    observation = bodies.applied(observation, decision)
    for name in {p["metadata"]["name"] for p in observation.pods}:
        observation = bodies.acknowledged(observation, name)
    return observation, decision


def _steady() -> tuple[observations.Observation, Counter[str]]:
    moved: Counter[str] = Counter()
    old = [revision_pod(n, "5d8f6c7b9") for n in ("a", "b", "c")]
    observation = bodies.observe(pods=old, ids=IDS)
    observation, _ = _cycle(observation, now=0, moved=moved)
    assert {p: len(ps) for p, ps in bodies.assignment(observation).items()} == {
        "a": 4,
        "b": 4,
        "c": 4,
    }
    return observation, moved


def test_the_pods_of_an_older_revision_are_the_outgoing_ones() -> None:
    states = [
        podstates.pod_state(revision_pod("a", "5d8f6c7b9")),
        podstates.pod_state(revision_pod("b", "5d8f6c7b9")),
        podstates.pod_state(revision_pod("n", "7f9c4d6b8", created=50)),
        podstates.pod_state(pod("plain")),  # no Deployment's: never outgoing
    ]
    assert podstates.outgoing(states) == {"a", "b"}
    # A rollback: the old revision's new pod is the newest, the abandoned revision goes.
    states.append(podstates.pod_state(revision_pod("r", "5d8f6c7b9", created=60)))
    assert podstates.outgoing(states) == {"n"}
    # One revision: no rollout.
    assert podstates.outgoing(states[:2]) == frozenset()


def test_a_new_revisions_pod_takes_the_partitions_of_the_pod_it_replaces_and_no_others() -> None:
    observation, moved = _steady()
    new = revision_pod("n", "7f9c4d6b8", created=10, since=12)
    observation = bodies.with_pods(observation, new)
    observation, ready = _cycle(observation, now=12, moved=moved)
    # Nothing is taken from a, b and c for it: the Deployment deletes one of them next.
    assert ready.moves == ()
    # Its wait ends with podGraceSeconds: the cycle comes back then, whatever happens.
    assert ready.next_in == GRACE
    deleted = terminating(revision_pod("b", "5d8f6c7b9"), since=12.4)
    observation = bodies.with_pods(observation, deleted)
    for now in (12.5, 15.0, 15.1):  # b releases on its SIGTERM; its wait for that is 2 s
        observation, _ = _cycle(observation, now=now, moved=moved)
    held = bodies.assignment(observation)
    assert {p: len(ps) for p, ps in held.items() if ps} == {"a": 4, "c": 4, "n": 4}
    assert sum(moved.values()) == 4
    assert max(moved.values()) == 1


def test_a_paused_rollouts_new_pod_gets_its_share_once_the_grace_period_is_over() -> None:
    observation, moved = _steady()
    observation = bodies.with_pods(
        observation, revision_pod("n", "7f9c4d6b8", created=10, since=12)
    )
    observation, ready = _cycle(observation, now=12, moved=moved)
    assert ready.moves == ()
    # No old pod is deleted (the rollout is paused): the new pod is not left idle.
    observation, late = _cycle(observation, now=12 + GRACE, moved=moved)
    assert {m.target for m in late.moves} == {"n"}
    observation, _ = _cycle(observation, now=12.1 + GRACE, moved=moved)
    held = bodies.assignment(observation)
    assert {p: len(ps) for p, ps in held.items()} == {"a": 3, "b": 3, "c": 3, "n": 3}
