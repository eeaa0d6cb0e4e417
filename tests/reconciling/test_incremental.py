"""A steady cycle's work outside the planner is lookups: pods, the record, acknowledgements.

What a cycle reads of each pod (`podstates.pod_state`), of each entry of the status record
(`readbacks.read_entry`), of each acknowledgement (`configmaps.parse_released`) and of each
ConfigMap's coordinates (`coordinates.of_map`) is computed again only for what changed, and a
decision taken with every memo warm is the one taken with all of them empty.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps, podstates, specs
from eventhub_balancer.reconciling import (
    coordinates,
    deciding,
    observations,
    readbacks,
)
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod

forget = bodies.forget


def cold(observation: observations.Observation, *, now: Any) -> deciding.Decision:
    forget()
    return deciding.decide(observation, now=now)


def fresh(observation: observations.Observation) -> observations.Observation:
    """The same observation in new objects, as the next cycle's watch events give it."""
    return dataclasses.replace(
        observation,
        body=copy.deepcopy(observation.body),
        pods=copy.deepcopy(observation.pods),
        configmaps=copy.deepcopy(observation.configmaps),
    )


def steps(observation: observations.Observation, now: Any) -> observations.Observation:
    """One cycle, checked against the cold decision (before and after it), applied."""
    observation, decision = bodies.decide_fully(observation, now=now)
    assert deciding.decide(fresh(observation), now=now) == decision  # warm
    assert cold(observation, now=now) == decision
    assert deciding.decide(observation, now=now) == decision  # warm after cold
    return bodies.applied(observation, decision)


def started(*names: str, partitions: int = 12) -> observations.Observation:
    observation = bodies.observe(
        pods=[pod(n) for n in names], ids=tuple(map(str, range(partitions)))
    )
    for second in range(3):
        observation = steps(observation, at(second))
    return observation


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What was read again from now on: pods, record entries, acknowledgements, coordinates."""
    seen: dict[str, list[Any]] = {"pod": [], "entry": [], "released": [], "map": []}
    pod_state, read_entry = podstates.pod_state, readbacks.read_entry
    parse_released, of_map = configmaps.parse_released, coordinates.of_map

    def counted_pod(body: Any) -> podstates.PodState:
        seen["pod"].append(body["metadata"]["name"])
        return pod_state(body)

    def counted_entry(key: Any) -> Any:
        seen["entry"].append(key[0])
        return read_entry(key)

    def counted_released(annotations: Any) -> Any:
        seen["released"].append(annotations)
        return parse_released(annotations)

    def counted_map(cm: observations.StoredMap) -> Any:
        seen["map"].append(cm.pod)
        return of_map(cm)

    monkeypatch.setattr(podstates, "pod_state", counted_pod)
    monkeypatch.setattr(readbacks, "read_entry", counted_entry)
    monkeypatch.setattr(configmaps, "parse_released", counted_released)
    monkeypatch.setattr(coordinates, "of_map", counted_map)
    return seen


def clear(seen: dict[str, list[Any]]) -> None:
    for found in seen.values():
        found.clear()


def revoking(observation: observations.Observation) -> observations.Observation:
    """Steady but for a hand-off in flight: one pod joined and partitions are revoking."""
    joined = bodies.with_pods(observation, pod("z"))
    joined, decision = bodies.decide_fully(joined, now=at(5))
    assert any(m.kind == "revoke" for m in decision.moves)
    return bodies.applied(joined, decision)


def test_a_steady_cycle_reads_no_pod_record_entry_or_coordinates_again(
    calls: dict[str, list[Any]],
) -> None:
    observation = started(*"abcdef")
    deciding.decide(observation, now=at(10))
    clear(calls)
    decision = deciding.decide(fresh(observation), now=at(11))
    assert decision.writes.count == 0
    assert calls == {"pod": [], "entry": [], "released": [], "map": []}


def test_parse_time_is_not_called_for_unchanged_pods_or_record_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    observation = revoking(started(*"abcdef"))
    deciding.decide(observation, now=at(10))
    read: list[object] = []
    parse_time = specs.parse_time

    def counted(value: object) -> Any:
        read.append(value)
        return parse_time(value)

    monkeypatch.setattr(specs, "parse_time", counted)
    deciding.decide(fresh(observation), now=at(11))
    # Only the EventHubConsumer's own creation time (`conflicts.peer`): nothing per pod or
    # per partition.
    assert read == [observation.body["metadata"].get("creationTimestamp")]


def test_acknowledgements_are_parsed_once_per_text(calls: dict[str, list[Any]]) -> None:
    observation = revoking(started(*"abcdef"))
    acked = bodies.acknowledged(observation, "a")
    deciding.decide(acked, now=at(10))
    assert len(calls["released"]) == 1  # the one pod that wrote one
    clear(calls)
    deciding.decide(fresh(acked), now=at(11))
    assert calls["released"] == []


def test_only_the_changed_pod_is_read_again(calls: dict[str, list[Any]]) -> None:
    observation = started(*"abcdef")
    deciding.decide(observation, now=at(10))
    clear(calls)
    changed = bodies.with_pods(fresh(observation), pod("c", ready=False, since=9.0))
    warm = deciding.decide(changed, now=at(11))
    assert calls["pod"] == ["c"]
    assert warm == cold(changed, now=at(11))


def test_only_the_changed_record_entry_is_read_again(calls: dict[str, list[Any]]) -> None:
    observation = started(*"abc")
    deciding.decide(observation, now=at(10))
    body = copy.deepcopy(observation.body)
    entry = body["status"]["assignment"][3]
    entry["since"] = specs.format_time(at(7))
    clear(calls)
    deciding.decide(dataclasses.replace(observation, body=body), now=at(11))
    assert calls["entry"] == [entry["partition"]]


def test_warm_and_cold_decide_alike_through_joins_leaves_acks_and_status_changes() -> None:
    observation = started("a", "b", "c")
    observation = bodies.with_pods(observation, pod("d"))
    for second in range(10, 14):
        observation = steps(observation, at(second))
        for name in "abc":
            observation = bodies.acknowledged(observation, name)
    observation = bodies.with_pods(observation, pod("a", ready=False, since=14.0))
    for second in range(14, 17):
        observation = steps(observation, at(second))
    gone = tuple(p for p in observation.pods if p["metadata"]["name"] != "b")
    observation = dataclasses.replace(observation, pods=gone)
    for second in range(20, 24):
        observation = steps(observation, at(second))
        for name in "acd":
            observation = bodies.acknowledged(observation, name)
    # The status changed by someone else: an entry moved to another pod, an epoch raised.
    body = copy.deepcopy(observation.body)
    body["status"]["assignment"][0]["pod"] = "c"
    body["status"]["epochs"]["1"] = int(body["status"]["epochs"]["1"]) + 5
    observation = dataclasses.replace(observation, body=body)
    for second in range(30, 34):
        observation = steps(observation, at(second))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("epoch", True, id="epoch-true-is-not-1"),
        pytest.param("epoch", 1.0, id="epoch-float-is-not-1"),
        pytest.param("podUid", ["not", "hashable"], id="unhashable"),
        pytest.param("since", "not a time", id="since-unreadable"),
    ],
)
def test_an_odd_record_entry_reads_as_if_nothing_were_kept(field: str, value: Any) -> None:
    status: Any = {
        "assignment": [
            {"partition": "0", "pod": "a", "podUid": "u", "epoch": 1, "state": "owned"},
        ]
    }
    readbacks.record(status)  # the plain entry is kept
    odd = copy.deepcopy(status)
    odd["assignment"][0][field] = value
    warm = readbacks.record(odd)
    forget()
    assert warm == readbacks.record(odd)


@pytest.mark.parametrize(
    "epochs",
    [
        pytest.param({"0": True}, id="true-is-not-1"),
        pytest.param({"0": 1.0}, id="float-is-not-1"),
        pytest.param({"0": -1}, id="out-of-range"),
    ],
)
def test_odd_status_epochs_read_as_if_nothing_were_kept(epochs: dict[str, Any]) -> None:
    def floors(status_epochs: dict[str, Any]) -> tuple[dict[Any, int], list[str]]:
        ignored: list[str] = []
        return readbacks._floors(status_epochs, {}, ignored), ignored

    floors({"0": 1})
    warm = floors(epochs)
    readbacks.FLOORS.clear()
    assert warm == floors(epochs)
    assert floors({"0": 1}) == ({"0": 1}, [])
