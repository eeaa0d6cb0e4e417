"""The scenario format: what parses, what is refused with which field named, and round trips."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings

from eventhub_balancer import errors
from eventhub_balancer.balancing import models, planning, scenarios
from tests.support import simulation

MINIMAL = {"partitions": ["0", "1"], "members": [{"name": "pod-a", "state": "ready"}]}


def with_(**changes: Any) -> dict[str, Any]:
    return {**MINIMAL, **changes}


def test_a_minimal_scenario_gets_every_default() -> None:
    s = scenarios.parse(MINIMAL)
    assert s == models.Scenario(
        partitions=(models.PartitionId("0"), models.PartitionId("1")),
        members=(models.Member(name=models.MemberName("pod-a"), state="ready"),),
    )
    assert s.options == models.Options(
        pod_grace_seconds=20,
        handoff_timeout_seconds=30,
        max_moves_per_cycle=0,
        weighting="count",
        lag_tolerance=0.25,
    )


def test_every_key_is_read() -> None:
    s = scenarios.parse(
        {
            "partitions": ["0", "1"],
            "members": [
                {"name": "a", "state": "notready", "since": 5, "weight": 2.5, "starting": True}
            ],
            "assignment": {
                "0": {"owner": "a", "epoch": 3, "state": "revoking", "since": 7.5},
                "1": {"owner": None, "epoch": 2},
            },
            "released": {"0": 3},
            "lag": {"1": 40},
            "now": 12,
            "options": {
                "podGraceSeconds": 10,
                "handoffTimeoutSeconds": 15,
                "maxMovesPerCycle": 4,
                "weighting": "lag",
                "lagTolerance": 0.5,
            },
        }
    )
    assert s.members == (
        models.Member(
            name=models.MemberName("a"), state="notready", since=5.0, weight=2.5, starting=True
        ),
    )
    assert s.assignment == {
        "0": models.Ownership(owner=models.MemberName("a"), epoch=3, state="revoking", since=7.5),
        "1": models.Ownership(owner=None, epoch=2),
    }
    assert (s.released, s.lag, s.now) == ({"0": 3}, {"1": 40}, 12.0)
    assert s.options == models.Options(
        pod_grace_seconds=10,
        handoff_timeout_seconds=15,
        max_moves_per_cycle=4,
        weighting="lag",
        lag_tolerance=0.5,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "scenario: expected an object, got a list"),
        (
            {"members": []},
            'partitions: required: the hub\'s partition ids, as ["0", "1", "2", "3"]',
        ),
        (
            {"partitions": []},
            'members: required: the pods to balance over, as [{"name": "c-0"}, {"name": "c-1"}]',
        ),
        (with_(partitions="0-3"), "partitions: expected a list, got the string '0-3'"),
        (with_(partitions=["0", 1]), "partitions[1]: expected a string, got the number 1"),
        (
            with_(partitions=["0", "0"]),
            "partitions[1]: duplicate partition id '0' (also partitions[0])",
        ),
        (
            with_(members=[{"name": "a", "state": "redy"}]),
            "members[0].state: unknown state 'redy' (expected ready, notready or terminating)",
        ),
        (
            with_(members=[{"name": "a"}, {"name": "b"}, {"name": "a"}]),
            "members[2].name: duplicate member name 'a' (also members[0])",
        ),
        (with_(members=[{"state": "ready"}]), "members[0].name: required"),
        (with_(members=[{"name": ""}]), "members[0].name: must not be empty"),
        (with_(members=[{"name": "a", "weight": 0}]), "members[0].weight: must be positive, got 0"),
        (
            with_(members=[{"name": "a", "starting": "yes"}]),
            "members[0].starting: expected true or false, got the string 'yes'",
        ),
        (
            with_(members=[{"name": "a", "wieght": 2}]),
            "members[0].wieght: unknown key "
            "(expected one of name, state, since, weight, starting, outgoing, restarted)",
        ),
        (
            with_(assignment={"1": {"owner": "a", "epoch": -1}}),
            'assignment["1"].epoch: must not be negative, got -1',
        ),
        (
            with_(assignment={"1": {"owner": "a", "epoch": 1.5}}),
            'assignment["1"].epoch: expected a whole number, got the number 1.5',
        ),
        (
            with_(assignment={"1": {"owner": "a"}}),
            'assignment["1"].epoch: required (owner may be null)',
        ),
        (
            with_(assignment={"1": {"owner": "a", "epoch": 1, "state": "moving"}}),
            "assignment[\"1\"].state: unknown state 'moving' (expected owned or revoking)",
        ),
        (
            with_(assignment={"1": {"owner": None, "epoch": 1, "state": "revoking"}}),
            'assignment["1"].state: an entry without owner cannot be revoking',
        ),
        (with_(released={"1": True}), 'released["1"]: expected a whole number, got a boolean'),
        (with_(lag={"1": -5}), 'lag["1"]: must not be negative, got -5'),
        (with_(idle="0,1"), "idle: expected a list, got the string '0,1'"),
        (with_(idle=["0", 1]), "idle[1]: expected a string, got the number 1"),
        (with_(now="soon"), "now: expected a number, got the string 'soon'"),
        (
            with_(options={"weighting": "bytes"}),
            "options.weighting: unknown weighting 'bytes' (expected count or lag)",
        ),
        (
            with_(options={"podGraceSecond": 3}),
            "options.podGraceSecond: unknown key (expected one of podGraceSeconds, "
            "handoffTimeoutSeconds, releaseWaitSeconds, maxMovesPerCycle, weighting, lagTolerance)",
        ),
        (
            with_(options={"lagTolerance": -0.1}),
            "options.lagTolerance: must be between 0 and 10, got -0.1",
        ),
        (
            with_(options={"lagTolerance": 25}),
            "options.lagTolerance: must be between 0 and 10, got 25",
        ),
        (
            with_(options={"lagTolerance": "25%"}),
            "options.lagTolerance: expected a number, got the string '25%'",
        ),
        (
            with_(options={"handoffTimeoutSeconds": -1}),
            "options.handoffTimeoutSeconds: must not be negative, got -1",
        ),
        (
            with_(extra=1),
            "extra: unknown key (expected one of partitions, members, assignment, released, "
            "lag, idle, now, options)",
        ),
    ],
)
def test_bad_input_names_the_field(body: object, message: str) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        scenarios.parse(body)
    assert str(caught.value) == message


def test_idle_partitions_are_read_as_a_set() -> None:
    s = scenarios.parse(with_(idle=["1", "0"]))
    assert s.idle == frozenset({"0", "1"})
    assert scenarios.dump_scenario(s)["idle"] == ["0", "1"]


def test_an_assignment_to_a_partition_not_listed_is_fine() -> None:
    s = scenarios.parse(with_(assignment={"7": {"owner": "pod-a", "epoch": 2}}))
    assert "7" in s.assignment


def test_malformed_json_names_line_and_column() -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        scenarios.load('{"partitions": ["0"],\n "members": [}')
    assert str(caught.value) == "scenario: malformed JSON at line 2, column 14: Expecting value"


def test_json_without_finite_numbers_is_refused() -> None:
    with pytest.raises(errors.InvalidInput, match="NaN is not a number JSON allows"):
        scenarios.load('{"partitions": [], "members": [], "now": NaN}')


@settings(max_examples=100, deadline=None)
@given(simulation.scenarios(starting=True))
def test_a_dumped_scenario_parses_back_to_itself(scenario: models.Scenario) -> None:
    text = json.dumps(scenarios.dump_scenario(scenario))
    assert scenarios.load(text) == scenario


def test_a_plan_dumps_to_the_output_format() -> None:
    s = scenarios.parse(
        with_(
            members=[{"name": "a"}, {"name": "b"}],
            assignment={"0": {"owner": "a", "epoch": 1}, "1": {"owner": "a", "epoch": 4}},
            now=9,
        )
    )
    assert scenarios.dump_plan(planning.plan(s)) == {
        "assignment": {
            "0": {"owner": "a", "epoch": 1, "state": "owned", "since": 0},
            "1": {"owner": "a", "epoch": 4, "state": "revoking", "since": 9},
        },
        "moves": [{"partition": "1", "from": "a", "to": "b", "epoch": 4, "kind": "revoke"}],
        "balanced": False,
        "targets": {"a": 1, "b": 1},
    }


@settings(max_examples=100, deadline=None)
@given(simulation.scenarios(weighting="lag"))
def test_a_dumped_lag_scenario_keeps_its_tolerance(scenario: models.Scenario) -> None:
    body = scenarios.dump_scenario(scenario)
    assert body["options"]["lagTolerance"] == scenario.options.lag_tolerance
    assert scenarios.load(json.dumps(body)) == scenario


def test_the_tolerance_bounds_are_accepted() -> None:
    for value in (0, 10):
        assert (
            scenarios.parse(with_(options={"lagTolerance": value})).options.lag_tolerance == value
        )
