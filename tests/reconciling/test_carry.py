"""`deciding.decide` is a function of its arguments: the carry is the only thing handed on.

The same observation, carry and time give the same decision and carry, and a decision taken
with the carry of the last one is the decision taken cold. Between cycles the bodies that did
not change are the very same objects, as the watch's cache hands them out, so the carry is
really used (`fleets.advance` carries reads over by identity).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, partitionreports, podassignments, podstates
from eventhub_balancer.reconciling import deciding, decisions, observations
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def same_objects(
    before: observations.Observation, after: observations.Observation
) -> observations.Observation:
    """``after`` with each body equal to the one of its name in ``before`` replaced by that
    very object: what the watch's cache hands out for an object no event replaced."""

    def kept(
        old: tuple[Mapping[str, Any], ...], new: tuple[Mapping[str, Any], ...]
    ) -> tuple[Mapping[str, Any], ...]:
        by_name = {b["metadata"]["name"]: b for b in old}
        return tuple(
            by_name[b["metadata"]["name"]] if by_name.get(b["metadata"]["name"]) == b else b
            for b in new
        )

    return dataclasses.replace(
        after,
        pods=kept(before.pods, after.pods),
        configmaps=kept(before.configmaps, after.configmaps),
    )


def change(rng: random.Random, observation: observations.Observation, t: float) -> Any:
    """One random event between two cycles: joins, leaves, readiness flips, deletions,
    acknowledgements, tampering and partition reports."""
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
        parsed = podassignments.parse_data(cm["data"])
        if rng.random() < 0.5:
            claimed = {
                **parsed.partitions,
                models.PartitionId("0"): podassignments.PartitionEntry(epoch=99, state="owned"),
            }
            cm["data"][configmaps.KEY_PARTITIONS] = podassignments.build_data(
                spec=observation.spec,  # type: ignore[arg-type]
                consumer=bodies.NAME,
                pod=parsed.pod,
                generation=parsed.generation,
                partitions=claimed,
            )[configmaps.KEY_PARTITIONS]
        elif parsed.partitions:
            pid, entry = next(iter(parsed.partitions.items()))
            cm["metadata"].setdefault("annotations", {})[partitionreports.ANNOTATION] = (
                f'{{"{pid}":{{"epoch":{entry.epoch},"state":"parked","attempts":3}}}}'
            )
    return dataclasses.replace(observation, configmaps=tuple(maps))


def decide_fully(
    observation: observations.Observation, carry: decisions.Carry, *, t: float
) -> tuple[observations.Observation, decisions.Decision, decisions.Carry]:
    """As a cycle decides: again with the blobs (none stored) when asked, carrying on."""
    decision, carry = deciding.decide(observation, carry, now=at(t))
    if decision.needs_checkpoints:
        observation = bodies.read_blobs(observation, {})
        decision, carry = deciding.decide(observation, carry, now=at(t))
    return observation, decision, carry


@pytest.mark.parametrize("seed", range(12))
def test_decisions_with_the_carry_through_random_cycles_are_the_cold_ones(seed: int) -> None:
    rng = random.Random(seed)
    observation = bodies.observe(
        pods=[pod(f"p-{i}") for i in range(rng.randrange(2, 8))],
        ids=tuple(map(str, range(rng.randrange(4, 16)))),
    )
    carry = decisions.COLD
    for step in range(25):
        t = float(step * 3)
        observation, warm, carry = decide_fully(observation, carry, t=t)
        assert bodies.decide(observation, now=at(t)) == warm, f"step {step}"
        after = bodies.applied(observation, warm)
        observation = same_objects(observation, after)
        observation = same_objects(observation, change(rng, observation, t + 1))


def test_the_same_arguments_give_the_same_decision_and_carry() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")], checkpoints={})
    first, carry = deciding.decide(observation, None, now=at(0))
    observation = same_objects(observation, bodies.applied(observation, first))
    one = deciding.decide(observation, carry, now=at(5))
    two = deciding.decide(observation, carry, now=at(5))
    assert one == two
    assert one[0] == deciding.decide(observation, None, now=at(5))[0]


def test_nothing_new_hands_on_the_very_same_carry() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")], checkpoints={})
    _, carry = deciding.decide(observation, None, now=at(0))
    _, again = deciding.decide(observation, carry, now=at(1))
    assert again is carry


def test_the_carry_reads_only_the_pod_that_is_a_new_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    observation = bodies.observe(pods=[pod(n) for n in "abcd"], checkpoints={})
    _, carry = deciding.decide(observation, None, now=at(0))
    read: list[str] = []
    pod_state = podstates.pod_state

    def counted(body: Any) -> podstates.PodState:
        read.append(body["metadata"]["name"])
        return pod_state(body)

    monkeypatch.setattr(podstates, "pod_state", counted)
    flipped = (*observation.pods[:2], pod("c", ready=False, since=1.0), observation.pods[3])
    deciding.decide(dataclasses.replace(observation, pods=flipped), carry, now=at(1))
    assert read == ["c"]


def test_another_selectors_carry_is_not_used() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b", labels={"app": "d"})], checkpoints={})
    _, carry = deciding.decide(observation, None, now=at(0))
    spec = {**bodies.SPEC, "selector": {"matchLabels": {"app": "d"}}}
    other = bodies.observe(pods=observation.pods, spec=spec, checkpoints={})
    decision, _ = deciding.decide(other, carry, now=at(0))
    assert decision == bodies.decide(other, now=at(0))
    assert decision.pods == {"b"}
