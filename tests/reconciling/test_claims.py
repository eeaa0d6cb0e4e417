"""The findings kept from the last decision are those of checking every ConfigMap again.

`claims.follow` checks again only the ConfigMaps that changed or that name a partition whose
record entry or ``status.epochs`` value changed; `claims.find` checks every ConfigMap.
Through random changes of the ConfigMaps, the record and the epochs the two find the same.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.reconciling import claims, fleets, readbacks
from tests.reconciling import bodies

SPEC = bodies.observe(pods=[]).spec
assert SPEC is not None
SCOPE = fleets.scope_of(bodies.NS, bodies.NAME, SPEC.selector)
PODS = ["a", "b", "c", "d"]
PARTITIONS = [str(i) for i in range(8)]


def random_map(rng: random.Random) -> dict[str, Any]:
    assert SPEC is not None
    owner = rng.choice(PODS)
    partitions = {
        models.PartitionId(p): configmaps.PartitionEntry(
            epoch=rng.randrange(1, 4), state=rng.choice(["owned", "revoking"])
        )
        for p in rng.sample(PARTITIONS, rng.randrange(3))
    }
    data = configmaps.build_data(
        spec=SPEC, consumer=bodies.NAME, pod=owner, generation=1, partitions=partitions
    )
    if rng.random() < 0.1:
        data["extra"] = "x"
    if rng.random() < 0.1:
        data[configmaps.KEY_PARTITIONS] = "not json"
    name = configmaps.configmap_name(consumer=bodies.NAME, pod=owner)
    if rng.random() < 0.2:
        name = f"old-{owner}"
    return {
        "metadata": {
            "name": name,
            "namespace": bodies.NS,
            "uid": f"uid-{name}",
            "resourceVersion": str(rng.randrange(5)),
            "labels": configmaps.labels(consumer=bodies.NAME, pod=owner),
        },
        "data": data,
    }


def random_entry(rng: random.Random) -> readbacks.Recorded:
    return readbacks.Recorded(
        pod=rng.choice(PODS),
        pod_uid="",
        epoch=rng.randrange(1, 4),
        state=rng.choice(["owned", "revoking"]),
        since=None,
    )


@pytest.mark.parametrize("seed", range(30))
def test_following_the_changes_finds_what_checking_every_configmap_finds(seed: int) -> None:
    rng = random.Random(seed)
    claims.forget()
    maps: dict[str, Any] = {}
    for _ in range(4):
        body = random_map(rng)
        maps[body["metadata"]["name"]] = body
    recorded = {models.PartitionId(p): random_entry(rng) for p in PARTITIONS if rng.random() < 0.8}
    epochs: dict[str, Any] = {p: rng.randrange(1, 4) for p in PARTITIONS}
    fleet = fleets.build(
        scope=SCOPE,
        pods=(),
        configmaps=list(maps.values()),
        selector=SPEC.selector,
        consumer=bodies.NAME,
    )
    for _ in range(40):
        roll = rng.random()
        changed: dict[str, Any] = {}
        if roll < 0.35:
            if maps and rng.random() < 0.3:
                name = rng.choice(sorted(maps))
                del maps[name]
                changed[name] = None
            body = random_map(rng)
            maps[body["metadata"]["name"]] = changed[body["metadata"]["name"]] = body
        elif roll < 0.7:
            recorded = dict(recorded)
            for p in rng.sample(PARTITIONS, rng.randrange(1, 3)):
                if rng.random() < 0.2:
                    recorded.pop(models.PartitionId(p), None)
                else:
                    recorded[models.PartitionId(p)] = random_entry(rng)
        elif roll < 0.85:
            epochs = {**epochs, rng.choice(PARTITIONS): rng.choice([1, 2, 3, True, 2.0])}
        fleet = fleets.advance_by(fleet, pods={}, configmaps=changed, selector=SPEC.selector)
        followed = claims.follow(fleet, recorded, epochs)
        if rng.random() < 0.2:  # decided again over the same fleet
            followed = claims.follow(fleet, recorded, epochs)
        assert followed == claims.find(fleet.stored_maps(), recorded, epochs)
