"""Decisions taken warm, through random cycles, are the decisions taken cold.

Every step of a decision that keeps something from the last one (`fleets`, `needs`,
`claims`, `coordinates.stale`, `statuses.follow_consumers`) must give what it gives with
nothing kept. Random cycles of joins, leaves, readiness flips, deletions, acknowledgements,
tampering and partition reports are decided warm, and each decision is compared with the one
taken after forgetting everything.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, partitionreports
from eventhub_balancer.reconciling import deciding, fleets, observations, statuses
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def change(rng: random.Random, observation: observations.Observation, t: float) -> Any:
    """One random event between two cycles."""
    names = [p["metadata"]["name"] for p in observation.pods]
    roll = rng.random()
    if roll < 0.2 or not names:
        return bodies.with_pods(observation, pod(f"p-{rng.randrange(30)}"))
    name = rng.choice(names)
    if roll < 0.4:
        return bodies.with_pods(observation, pod(name, ready=rng.random() < 0.5, since=t))
    if roll < 0.5:
        gone = tuple(p for p in observation.pods if p["metadata"]["name"] != name)
        return dataclasses.replace(observation, pods=gone)
    if roll < 0.6:
        leaving = pod(name)
        leaving["metadata"]["deletionTimestamp"] = leaving["metadata"]["creationTimestamp"]
        return bodies.with_pods(observation, leaving)
    if roll < 0.8:
        return bodies.acknowledged(observation, name)
    maps = [copy.deepcopy(dict(cm)) for cm in observation.configmaps]
    if maps:
        cm = rng.choice(maps)
        if rng.random() < 0.5:
            parsed = configmaps.parse_data(cm["data"])
            claimed = {
                **parsed.partitions,
                models.PartitionId("0"): configmaps.PartitionEntry(epoch=99, state="owned"),
            }
            cm["data"][configmaps.KEY_PARTITIONS] = configmaps.build_data(
                spec=observation.spec,  # type: ignore[arg-type]
                consumer=bodies.NAME,
                pod=parsed.pod,
                generation=parsed.generation,
                partitions=claimed,
            )[configmaps.KEY_PARTITIONS]
        else:
            parsed = configmaps.parse_data(cm["data"])
            if parsed.partitions:
                pid, entry = next(iter(parsed.partitions.items()))
                cm["metadata"].setdefault("annotations", {})[partitionreports.ANNOTATION] = (
                    f'{{"{pid}":{{"epoch":{entry.epoch},"state":"parked","attempts":3}}}}'
                )
    return dataclasses.replace(observation, configmaps=tuple(maps))


@pytest.mark.parametrize("seed", range(12))
def test_warm_decisions_through_random_cycles_are_the_cold_ones(seed: int) -> None:
    rng = random.Random(seed)
    bodies.forget()
    observation = bodies.observe(
        pods=[pod(f"p-{i}") for i in range(rng.randrange(2, 8))],
        ids=tuple(map(str, range(rng.randrange(4, 16)))),
    )
    for step in range(25):
        t = float(step * 3)
        observation, warm = bodies.decide_fully(observation, now=at(t))
        bodies.forget()
        assert deciding.decide(observation, now=at(t)) == warm, f"step {step}"
        observation = bodies.applied(observation, warm)
        observation = change(rng, observation, t + 1)


def test_the_consumers_list_follows_the_changed_pods_and_partitions() -> None:
    """`statuses.follow_consumers` gives `consumer_entries` and makes only changed entries."""
    states = {f"p-{i}": pod(f"p-{i}") for i in range(6)}
    spec = bodies.observe(pods=[]).spec
    assert spec is not None
    scope = ("follow",)
    fleet = fleets.build(
        scope=scope, pods=states.values(), configmaps=(), selector=spec.selector, consumer="c"
    )
    assignment = {
        models.PartitionId(str(i)): models.Ownership(
            owner=models.MemberName(f"p-{i % 6}"), epoch=1, since=0.0
        )
        for i in range(12)
    }
    statuses.forget()
    first = statuses.follow_consumers(fleet, assignment)
    assert first == statuses.consumer_entries(fleet.states, assignment)
    states["p-2"] = pod("p-2", ready=False, since=5.0)
    states["p-10"] = pod("p-10")
    fleet = fleets.advance_by(
        fleet,
        pods={"p-2": states["p-2"], "p-10": states["p-10"], "p-5": None},
        configmaps={},
        selector=spec.selector,
    )
    moved = {
        **assignment,
        models.PartitionId("0"): models.Ownership(
            owner=models.MemberName("p-10"), epoch=2, state="owned", since=1.0
        ),
        models.PartitionId("1"): dataclasses.replace(
            assignment[models.PartitionId("1")], state="revoking"
        ),
    }
    followed = statuses.follow_consumers(fleet, moved)
    assert followed == statuses.consumer_entries(fleet.states, moved)
    # Entries of pods nothing concerned are the very objects of the last list.
    unchanged = {"p-3", "p-4"}
    kept = {e["pod"]: e for e in first}
    assert all(e is kept[e["pod"]] for e in followed if e["pod"] in unchanged)
