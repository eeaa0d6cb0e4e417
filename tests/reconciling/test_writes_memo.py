"""A cycle's per-pod work follows what changed: the fleet (`fleets`) and the memo of `writes`.

An unchanged pod costs no JSON (no `configmaps.parse_data`, no `configmaps.build_data`), and
a decision taken with the memos warm is the decision taken with them empty.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, podstates, specs
from eventhub_balancer.reconciling import (
    deciding,
    fleets,
    observations,
    writes,
)
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod

forget = bodies.forget


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The pods whose ConfigMap data was parsed or built, from now on."""
    seen: dict[str, list[str]] = {"parse": [], "build": []}
    parse, build = configmaps.parse_data, configmaps.build_data

    def counted_parse(data: Any) -> configmaps.ParsedData:
        seen["parse"].append(str(data.get(configmaps.KEY_POD)))
        return parse(data)

    def counted_build(**kwargs: Any) -> dict[str, str]:
        seen["build"].append(kwargs["pod"])
        return build(**kwargs)

    monkeypatch.setattr(configmaps, "parse_data", counted_parse)
    monkeypatch.setattr(configmaps, "build_data", counted_build)
    return seen


def cold(observation: observations.Observation, *, now: Any) -> deciding.Decision:
    """The decision with nothing kept from earlier cycles."""
    forget()
    return deciding.decide(observation, now=now)


def steps(observation: observations.Observation, now: Any) -> observations.Observation:
    """One cycle, checked against the cold decision, applied."""
    observation, decision = bodies.decide_fully(observation, now=now)
    assert deciding.decide(observation, now=now) == decision  # warm, twice
    assert cold(observation, now=now) == decision
    return bodies.applied(observation, decision)


def started(*names: str) -> observations.Observation:
    observation = bodies.observe(pods=[pod(n) for n in names], ids=tuple(map(str, range(12))))
    for second in range(3):
        observation = steps(observation, at(second))
    return observation


def test_a_steady_cycle_parses_and_builds_nothing(calls: dict[str, list[str]]) -> None:
    observation = started("a", "b", "c")
    deciding.decide(observation, now=at(10))  # the cycle after the last write
    calls["parse"].clear()
    calls["build"].clear()
    decision = deciding.decide(dataclasses.replace(observation), now=at(11))
    assert decision.writes.count == 0
    assert calls == {"parse": [], "build": []}


def test_only_the_changed_configmap_is_parsed(calls: dict[str, list[str]]) -> None:
    observation = started("a", "b", "c")
    deciding.decide(observation, now=at(10))
    maps = [copy.deepcopy(dict(cm)) for cm in observation.configmaps]
    for cm in maps:
        if cm["data"][configmaps.KEY_POD] == "b":
            cm["data"]["extra"] = "hand-edited"
    calls["parse"].clear()
    calls["build"].clear()
    decision = deciding.decide(dataclasses.replace(observation, configmaps=tuple(maps)), now=at(11))
    assert [w.pod for w in decision.writes.maps] == ["b"]  # put back
    assert calls == {"parse": ["b"], "build": []}  # its data is the one built before


def test_a_joining_pod_rebuilds_only_the_pods_whose_partitions_change(
    calls: dict[str, list[str]],
) -> None:
    observation = started(*"abcdef")
    deciding.decide(observation, now=at(10))
    calls["build"].clear()
    joined = bodies.with_pods(observation, pod("g"))
    _, decision = bodies.decide_fully(joined, now=at(11))
    changed = {w.pod for w in decision.writes.maps}
    assert "g" in changed
    assert len(changed) < 7
    assert set(calls["build"]) == changed


def test_warm_and_cold_decide_alike_through_joins_leaves_and_acknowledgements() -> None:
    observation = started("a", "b", "c")
    observation = bodies.with_pods(observation, pod("d"))
    for second in range(10, 14):
        observation = steps(observation, at(second))
        for name in "abc":
            observation = bodies.acknowledged(observation, name)
    gone = tuple(p for p in observation.pods if p["metadata"]["name"] != "b")
    observation = dataclasses.replace(observation, pods=gone)
    for second in range(20, 24):
        observation = steps(observation, at(second))


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({**bodies.SPEC, "processing": {"maxAttempts": 3}}, id="processing"),
        pytest.param(
            {**bodies.SPEC, "eventHub": {**bodies.SPEC["eventHub"], "name": "other"}},
            id="event-hub",
        ),
    ],
)
def test_a_changed_spec_rewrites_every_configmap_as_without_the_memo(
    spec: dict[str, Any],
) -> None:
    observation = started("a", "b")
    deciding.decide(observation, now=at(10))
    changed = dataclasses.replace(observation, spec=specs.parse_spec(spec))
    decision = deciding.decide(changed, now=at(11))
    assert decision == cold(changed, now=at(11))
    assert sorted(w.pod for w in decision.writes.maps) == ["a", "b"]
    after = bodies.applied(changed, decision)
    assert deciding.decide(after, now=at(12)).writes.count == 0


def test_a_changed_partition_entry_is_written_as_without_the_memo() -> None:
    observation = started("a", "b")
    decision = deciding.decide(observation, now=at(10))
    assert decision.writes.count == 0
    assert observation.spec is not None
    fleet = fleets.build(
        scope=None,
        pods=observation.pods,
        configmaps=observation.configmaps,
        selector=observation.spec.selector,
        consumer=bodies.NAME,
    )
    maps = fleet.stored_maps()
    back = {m.pod: dict(m.parsed.partitions) for m in maps}
    assignment = {
        pid: models.Ownership(
            owner=models.MemberName(owner),
            epoch=entry.epoch,
            state=entry.state,
            since=podstates.to_seconds(entry.since or at(0)),
        )
        for owner, entries in back.items()
        for pid, entry in entries.items()
    }
    first = next(iter(assignment))
    for change in (
        {"state": "revoking"},
        {"epoch": assignment[first].epoch + 1},
        {"since": assignment[first].since + 1},
    ):
        moved = {**assignment, first: dataclasses.replace(assignment[first], **change)}
        kwargs: dict[str, Any] = dict(
            spec=observation.spec,
            consumer=bodies.NAME,
            namespace=bodies.NS,
            maps=maps,
            pods=fleet.states,
            pod_annotations={},
        )
        writes.derive_writes(assignment=assignment, **kwargs)  # warm
        warm = writes.derive_writes(assignment=moved, **kwargs)
        forget()
        assert warm == writes.derive_writes(assignment=moved, **kwargs)
        assert [w.pod for w in warm.maps] == [assignment[first].owner]


def test_the_memos_keep_only_what_the_last_cycle_used() -> None:
    observation = started(*"abcdef")
    deciding.decide(observation, now=at(10))
    assert len(writes.BUILT) == 6
    kept = tuple(p for p in observation.pods if p["metadata"]["name"] in ("a", "b"))
    observation = dataclasses.replace(observation, pods=kept)
    for second in range(11, 15):
        observation = steps(observation, at(second))
    deciding.decide(observation, now=at(20))
    assert len(writes.BUILT) == 2
