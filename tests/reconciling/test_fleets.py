"""A fleet carried over from the last one is the fleet read whole, and reads only new objects.

`fleets.advance` carries each pod and ConfigMap over from the last fleet when its body is the
very object read there, and reads it again otherwise (an equal copy included): whatever the
changes, the advanced fleet equals `fleets.build` over the same bodies.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, partitionreports, podassignments, podstates
from eventhub_balancer.reconciling import fleets, observations
from tests.reconciling import bodies
from tests.reconciling.bodies import pod

SPEC = bodies.observe(pods=[]).spec
assert SPEC is not None
SELECTOR = SPEC.selector
SCOPE = fleets.scope_of(bodies.NS, bodies.NAME, SELECTOR)


def configmap(
    *, pod_name: str = "a", rv: str = "1", partitions: str = '{"0":{"epoch":1,"state":"owned"}}'
) -> Any:
    assert SPEC is not None
    data = podassignments.build_data(
        spec=SPEC, consumer=bodies.NAME, pod=pod_name, generation=1, partitions={}
    )
    data[configmaps.KEY_PARTITIONS] = partitions
    return {
        "metadata": {
            "name": f"ehb-orders-{pod_name}",
            "namespace": bodies.NS,
            "uid": f"uid-cm-{pod_name}",
            "resourceVersion": rv,
            "labels": configmaps.labels(consumer=bodies.NAME, pod=pod_name),
            "annotations": {configmaps.ANNOTATION_POD_UID: f"uid-{pod_name}"},
        },
        "data": data,
    }


def advance(previous: fleets.Fleet | None, pods: Any = (), maps: Any = ()) -> fleets.Fleet:
    return fleets.advance(
        previous,
        scope=SCOPE,
        pods=pods,
        configmaps=maps,
        selector=SELECTOR,
        consumer=bodies.NAME,
    )


def whole(pods: Any = (), maps: Any = ()) -> fleets.Fleet:
    return fleets.build(
        scope=SCOPE, pods=pods, configmaps=maps, selector=SELECTOR, consumer=bodies.NAME
    )


def same(a: fleets.Fleet, b: fleets.Fleet) -> None:
    """Everything a decision reads of the two fleets is equal (in any order, but the
    names and members, which are sorted)."""
    assert a.states == b.states
    assert a.stored == b.stored
    assert a.names == b.names
    assert a.members == b.members
    assert a.label_sets == b.label_sets
    assert (a.by_pod, a.current, a.reporting) == (b.by_pod, b.current, b.reporting)
    assert (a.ready, a.notready) == (b.ready, b.notready)
    assert a.concerned() == b.concerned()
    assert {n: r.annotations for n, r in a.pods.items()} == {
        n: r.annotations for n, r in b.pods.items()
    }
    reference(a)


def reference(fleet: fleets.Fleet) -> None:
    """The sums checked against their definitions, computed the plain way."""
    states = fleet.states
    assert fleet.ready == sum(s.state == "ready" for s in states.values())
    assert fleet.notready == {n for n, s in states.items() if s.state == "notready"}
    by_pod: dict[str, list[str]] = {}
    for name in sorted(fleet.stored, key=models.name_key):
        by_pod.setdefault(fleet.stored[name].pod, []).append(name)
    assert fleet.by_pod == {p: tuple(n) for p, n in by_pod.items()}
    current = {}
    for pod_name, state in states.items():
        own = configmaps.configmap_name(consumer=bodies.NAME, pod=pod_name)
        mine = by_pod.get(pod_name, [])
        for name in sorted(mine, key=lambda n: n != own):
            cm = fleet.stored[name]
            if state.state is not None and cm.pod_uid in ("", state.uid):
                current[pod_name] = cm
                break
    assert fleet.current == current
    assert fleet.reporting == {
        p for p, cm in current.items() if cm.annotations.get(partitionreports.ANNOTATION)
    }
    assert list(fleet.names) == sorted(states, key=models.name_key)


# --- ConfigMaps ---


def read(previous: fleets.Fleet | None, body: Any) -> tuple[fleets.Fleet, observations.StoredMap]:
    fleet = advance(previous, maps=[body])
    (found,) = fleet.stored_maps()
    return fleet, found


def counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    parse = podassignments.parse_data

    def counted(data: object) -> podassignments.ParsedData:
        calls.append(data)
        return parse(data)

    monkeypatch.setattr(podassignments, "parse_data", counted)
    return calls


def test_the_same_configmap_object_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    body = configmap()
    fleet, _ = read(None, body)
    calls = counting_parses(monkeypatch)
    assert advance(fleet, maps=[body]) is fleet  # nothing new: the very same fleet
    assert calls == []


def test_an_equal_copy_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only identity carries a read over: no content is ever taken for another's."""
    body = configmap()
    fleet, _ = read(None, body)
    calls = counting_parses(monkeypatch)
    again, found = read(fleet, copy.deepcopy(body))
    assert len(calls) == 1
    assert again is not fleet
    assert found == observations.stored_map(body)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda b: b["metadata"].update(resourceVersion="2"), id="resourceVersion"),
        pytest.param(
            lambda b: b["data"].update(partitions='{"0":{"epoch":2,"state":"revoking"}}'),
            id="data-same-resourceVersion",
        ),
        pytest.param(
            lambda b: b["metadata"]["annotations"].update(
                {configmaps.ANNOTATION_RELEASED: '{"0":1}'}
            ),
            id="annotation-same-resourceVersion",
        ),
        pytest.param(lambda b: b["data"].pop(configmaps.KEY_POD), id="pod-from-the-label"),
        pytest.param(lambda b: b["metadata"].update(name="renamed"), id="name"),
    ],
)
def test_a_changed_configmap_reads_as_if_nothing_were_kept(change: Any) -> None:
    body = configmap()
    fleet, _ = read(None, body)
    changed = copy.deepcopy(body)
    change(changed)
    fleet, found = read(fleet, changed)
    assert found == observations.stored_map(changed)
    _, back = read(fleet, body)
    assert back == observations.stored_map(body)  # and back


def test_another_consumers_configmap_is_not_in_the_fleet() -> None:
    theirs = configmap(pod_name="b")
    theirs["data"][configmaps.KEY_CONSUMER] = "payments"
    mine = configmap()
    fleet = advance(None, maps=[mine, theirs])
    assert set(fleet.stored) == {"ehb-orders-a"}
    assert advance(fleet, maps=[mine, theirs]) is fleet


# --- pods ---


def test_only_the_changed_pod_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [pod(n) for n in "abcdef"]
    fleet = advance(None, pods=pods)
    read_again: list[str] = []
    pod_state = podstates.pod_state

    def counted(body: Any) -> podstates.PodState:
        read_again.append(body["metadata"]["name"])
        return pod_state(body)

    monkeypatch.setattr(podstates, "pod_state", counted)
    changed = [*pods[:2], pod("c", ready=False, since=9.0), *pods[3:]]
    next_fleet = advance(fleet, pods=changed)
    assert read_again == ["c"]
    same(next_fleet, whole(changed))


def test_a_pod_that_no_longer_matches_leaves_the_fleet() -> None:
    fleet = advance(None, pods=[pod("a"), pod("b")])
    moved = advance(fleet, pods=[pod("a"), pod("b", labels={"app": "other"})])
    assert set(moved.states) == {"a"}
    assert moved.names == ("a",)
    assert [m.name for m in moved.members] == ["a"]


def test_another_scope_reads_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [pod("a")]
    fleet = advance(None, pods=pods)
    read_again: list[str] = []
    pod_state = podstates.pod_state

    def counted(body: Any) -> podstates.PodState:
        read_again.append(body["metadata"]["name"])
        return pod_state(body)

    monkeypatch.setattr(podstates, "pod_state", counted)
    other = fleets.advance(
        fleet,
        scope=("elsewhere",),
        pods=pods,
        configmaps=(),
        selector=SELECTOR,
        consumer=bodies.NAME,
    )
    assert read_again == ["a"]
    assert other.scope == ("elsewhere",)


def random_pod(rng: random.Random, name: str) -> Any:
    body = pod(
        name,
        ready=rng.random() < 0.7,
        since=float(rng.randrange(5)),
        labels={"app": "c", "shard": str(rng.randrange(3))} if rng.random() < 0.9 else {},
    )
    roll = rng.random()
    if roll < 0.1:
        body["metadata"]["deletionTimestamp"] = body["metadata"]["creationTimestamp"]
    elif roll < 0.15:
        body["status"]["phase"] = "Succeeded"
    elif roll < 0.25:
        body["metadata"]["uid"] = f"uid-{name}-{rng.randrange(3)}"
    if rng.random() < 0.2:
        body["metadata"]["annotations"] = {"note": str(rng.randrange(3))}
    return body


def random_map(rng: random.Random, names: list[str]) -> Any:
    """A ConfigMap for one of ``names``, under its own name, an older one, or another pod's."""
    owner = rng.choice(names)
    body = configmap(
        pod_name=owner,
        rv=str(rng.randrange(3)),
        partitions=f'{{"{rng.randrange(4)}":{{"epoch":1,"state":"owned"}}}}',
    )
    roll = rng.random()
    if roll < 0.6:
        body["metadata"]["name"] = configmaps.configmap_name(consumer=bodies.NAME, pod=owner)
    elif roll < 0.75:
        other = rng.choice(names)
        body["metadata"]["name"] = configmaps.configmap_name(consumer=bodies.NAME, pod=other)
    annotations = body["metadata"]["annotations"]
    if rng.random() < 0.2:
        annotations[configmaps.ANNOTATION_POD_UID] = f"uid-{owner}-{rng.randrange(3)}"
    if rng.random() < 0.2:
        annotations[partitionreports.ANNOTATION] = '{"0":{"epoch":1,"state":"parked"}}'
    return body


@pytest.mark.parametrize("seed", range(30))
def test_advancing_through_random_changes_is_reading_whole(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"p-{i}" for i in range(12)] + ["p-100", "q", "p-2a"]
    pods = {n: random_pod(rng, n) for n in rng.sample(names, 8)}
    maps: dict[str, Any] = {}
    for _ in range(5):
        body = random_map(rng, names)
        maps[body["metadata"]["name"]] = body
    fleet = advance(None, list(pods.values()), list(maps.values()))
    for _ in range(30):
        for name in rng.sample(names, rng.randrange(4)):
            if name in pods and rng.random() < 0.3:
                del pods[name]
            else:
                pods[name] = random_pod(rng, name)
        for name in rng.sample(sorted(maps), min(len(maps), rng.randrange(2))):
            del maps[name]
        for _ in range(rng.randrange(3)):
            body = random_map(rng, names)
            maps[body["metadata"]["name"]] = body
        listed = [copy.deepcopy(b) if rng.random() < 0.2 else b for b in pods.values()]
        fleet = advance(fleet, listed, list(maps.values()))
        same(fleet, whole(listed, list(maps.values())))


def test_a_ready_member_carries_when_the_operator_first_saw_it_ready() -> None:
    """The planner orders pods Ready in the same second (the Ready condition's resolution) by
    the operator's first sighting of each Ready (`models.Member.seen`); a NotReady pod's
    sighting is not of Ready, and a pod read without one sorts as before, by name."""
    ready, starting = pod("a"), pod("b", ready=False)
    seen = podstates.sightings({}, [ready, starting], wall=24.02)
    members = [
        fleets.read_pod(b, consumer=bodies.NAME, seen=seen[n])
        for b, n in ((ready, "a"), (starting, "b"))
    ]
    assert [m.seen for m in (r.member() for r in members) if m is not None] == [24.02, 0.0]
    plain = fleets.read_pod(ready, consumer=bodies.NAME).member()
    assert plain is not None
    assert plain.seen == 0.0
