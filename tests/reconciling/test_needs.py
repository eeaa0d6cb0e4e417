"""The needs kept from the last decision give the writes that deriving every pod's gives.

`needs.derive` derives again only the pods something concerns; `writes.derive_writes` derives
every pod. Through random changes of the pods, their ConfigMaps, the assignment and the
problems, the two give the same writes, and a pod nothing concerns is not derived again.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.reconciling import fleets, needs, writes
from tests.reconciling import bodies
from tests.reconciling.bodies import pod

SPEC = bodies.observe(pods=[]).spec
assert SPEC is not None
SCOPE = fleets.scope_of(bodies.NS, bodies.NAME, SPEC.selector)
NAMES = [f"p-{i}" for i in range(10)] + ["q", "p-1a"]
PARTITIONS = [models.PartitionId(str(i)) for i in range(16)]


def configmap(name: str, for_pod: str, partitions: dict[str, Any]) -> dict[str, Any]:
    assert SPEC is not None
    data = configmaps.build_data(
        spec=SPEC, consumer=bodies.NAME, pod=for_pod, generation=1, partitions=partitions
    )
    return {
        "metadata": {
            "name": name,
            "namespace": bodies.NS,
            "uid": f"uid-cm-{name}",
            "resourceVersion": "1",
            "labels": configmaps.labels(consumer=bodies.NAME, pod=for_pod),
            "annotations": {configmaps.ANNOTATION_POD_UID: f"uid-{for_pod}"},
        },
        "data": data,
    }


def random_pod(rng: random.Random, name: str) -> dict[str, Any]:
    body = pod(name, ready=rng.random() < 0.8)
    roll = rng.random()
    if roll < 0.1:
        body["metadata"]["deletionTimestamp"] = body["metadata"]["creationTimestamp"]
    elif roll < 0.15:
        body["status"]["phase"] = "Failed"
    elif roll < 0.2:
        body["metadata"]["uid"] = f"uid-{name}-{rng.randrange(9)}"
    if rng.random() < 0.3:
        body["metadata"]["annotations"] = {
            configmaps.POD_ANNOTATION_PARTITIONS: str(rng.randrange(3))
        }
    return body


def random_map(rng: random.Random, name: str) -> dict[str, Any]:
    roll = rng.random()
    name_of = writes.configmap_name(consumer=bodies.NAME, pod=name)
    if roll < 0.1:  # an older naming scheme, or another pod's name
        name_of = f"old-{name}"
    elif roll < 0.15:
        name_of = writes.configmap_name(consumer=bodies.NAME, pod=rng.choice(NAMES))
    partitions = {
        p: configmaps.PartitionEntry(epoch=rng.randrange(1, 3), state="owned")
        for p in rng.sample(PARTITIONS, rng.randrange(3))
    }
    return configmap(name_of, name, partitions)


def random_assignment(
    rng: random.Random, pods: list[str]
) -> dict[models.PartitionId, models.Ownership]:
    owners: list[str | None] = [*pods, None] if pods else [None]
    assignment: dict[models.PartitionId, models.Ownership] = {}
    for p in PARTITIONS:
        owner = rng.choice(owners)
        assignment[p] = models.Ownership(
            owner=models.MemberName(owner) if owner else None,
            epoch=rng.randrange(1, 3),
            state="revoking" if rng.random() < 0.1 else "owned",
            since=float(rng.randrange(2)),
        )
    return assignment


def cold(fleet: fleets.Fleet, **kwargs: Any) -> writes.Writes:
    return writes.derive_writes(
        maps=fleet.stored_maps(),
        pods=fleet.states,
        pod_annotations={n: r.annotations for n, r in fleet.pods.items()},
        spec=SPEC,
        consumer=bodies.NAME,
        namespace=bodies.NS,
        **kwargs,
    )


def warm(fleet: fleets.Fleet, **kwargs: Any) -> writes.Writes:
    assert SPEC is not None
    return needs.derive(fleet=fleet, spec=SPEC, consumer=bodies.NAME, namespace=bodies.NS, **kwargs)


def advance(fleet: fleets.Fleet | None, pods: dict[str, Any], maps: dict[str, Any]) -> fleets.Fleet:
    assert SPEC is not None
    return fleets.advance(
        fleet,
        scope=SCOPE,
        pods=[copy.deepcopy(b) for b in pods.values()],
        configmaps=[copy.deepcopy(b) for b in maps.values()],
        selector=SPEC.selector,
        consumer=bodies.NAME,
    )


@pytest.mark.parametrize("seed", range(25))
def test_kept_needs_write_what_deriving_every_pod_writes(seed: int) -> None:
    rng = random.Random(seed)
    needs.forget()
    annotate = rng.random() < 0.5
    pods = {n: random_pod(rng, n) for n in rng.sample(NAMES, 6)}
    maps: dict[str, Any] = {}
    for n in rng.sample(NAMES, 4):
        body = random_map(rng, n)
        maps[body["metadata"]["name"]] = body
    fleet = advance(None, pods, maps)
    assignment = random_assignment(rng, list(pods))
    problems: dict[str, tuple[str, ...]] = {}
    for _ in range(40):
        roll = rng.random()
        if roll < 0.3:
            for n in rng.sample(NAMES, rng.randrange(1, 3)):
                if n in pods and rng.random() < 0.3:
                    del pods[n]
                else:
                    pods[n] = random_pod(rng, n)
        elif roll < 0.55:
            for name in rng.sample(sorted(maps), min(len(maps), rng.randrange(2))):
                del maps[name]
            body = random_map(rng, rng.choice(NAMES))
            maps[body["metadata"]["name"]] = body
        elif roll < 0.8:
            changed = rng.sample(PARTITIONS, rng.randrange(1, 4))
            fresh = random_assignment(rng, list(pods))
            assignment = {**assignment, **{p: fresh[p] for p in changed}}
        elif roll < 0.9 and maps:
            problems = {name: ("tampered",) for name in rng.sample(sorted(maps), 1)}
        else:
            problems = {}
        fleet = advance(fleet, pods, maps)
        kwargs: dict[str, Any] = dict(
            assignment=assignment, problems=problems, annotate_pods=annotate
        )
        if rng.random() < 0.2:  # the same fleet decided again (with the checkpoints)
            warm(fleet, **kwargs)
        assert warm(fleet, **kwargs) == cold(fleet, **kwargs)


def test_a_pod_nothing_concerns_is_not_derived_again(monkeypatch: pytest.MonkeyPatch) -> None:
    needs.forget()
    pods = {n: pod(n) for n in NAMES}
    assignment = {
        p: models.Ownership(owner=models.MemberName(NAMES[i % len(NAMES)]), epoch=1, since=0.0)
        for i, p in enumerate(PARTITIONS)
    }
    fleet = advance(None, pods, {})
    first = warm(fleet, assignment=assignment, problems={}, annotate_pods=False)
    assert len(first.maps) == len(NAMES)
    maps = {
        w.name: {**w.body, "metadata": {**w.body["metadata"], "uid": w.name}} for w in first.maps
    }
    fleet = advance(fleet, pods, maps)
    derived: list[str] = []
    pod_writes = writes.pod_writes

    def counted(pod: Any, **kwargs: Any) -> writes.PodWrites:
        derived.append(pod.name)
        return pod_writes(pod, **kwargs)

    monkeypatch.setattr(writes, "pod_writes", counted)
    assert warm(fleet, assignment=assignment, problems={}, annotate_pods=False).count == 0
    assert sorted(derived) == sorted(NAMES)  # every ConfigMap appeared: every pod concerned
    derived.clear()
    assert warm(fleet, assignment=assignment, problems={}, annotate_pods=False).count == 0
    assert derived == []
    moved = {
        **assignment,
        PARTITIONS[0]: models.Ownership(owner=models.MemberName("q"), epoch=2, since=0.0),
    }
    planned = warm(fleet, assignment=moved, problems={}, annotate_pods=False)
    assert sorted(derived) == sorted([NAMES[0], "q"])
    assert [w.pod for w in planned.maps] == ["q", NAMES[0]]
