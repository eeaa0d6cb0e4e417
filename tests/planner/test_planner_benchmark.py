"""The planner benchmark measures what it says: the cases' scenarios and the figures' shape."""

from __future__ import annotations

import dataclasses
import json

import pytest

from eventhub_balancer import cli
from eventhub_balancer.balancing import planning
from eventhub_balancer_devstack.benchmarks import planner


def test_fresh_has_nothing_assigned() -> None:
    s = planner.scenario_for("fresh", partitions=32, pods=4)
    assert (len(s.partitions), len(s.members), dict(s.assignment)) == (32, 4, {})


def test_join_adds_a_member_to_a_balanced_assignment() -> None:
    s = planner.scenario_for("join", partitions=32, pods=4)
    assert [m.name for m in s.members] == ["pod-0", "pod-1", "pod-2", "pod-3", "pod-4"]
    plan = planning.plan(s)
    assert {m.kind for m in plan.moves} == {"revoke"}
    assert len(plan.moves) == 6  # 8,8,8,8 -> 7,7,6,6,6


def test_leave_removes_a_member_from_a_balanced_assignment() -> None:
    s = planner.scenario_for("leave", partitions=32, pods=4)
    assert [m.name for m in s.members] == ["pod-1", "pod-2", "pod-3"]
    plan = planning.plan(s)
    assert {(m.kind, m.source) for m in plan.moves} == {("takeover", "pod-0")}
    assert len(plan.moves) == 8


def test_figures_cover_every_size_and_case() -> None:
    figures = planner.run(repeat=1, sizes=((32, 4), (64, 8)))
    assert [(f["partitions"], f["pods"], f["case"]) for f in figures] == [
        (32, 4, "fresh"),
        (32, 4, "join"),
        (32, 4, "leave"),
        (64, 8, "fresh"),
        (64, 8, "join"),
        (64, 8, "leave"),
    ]
    assert all(f["ms"] > 0 for f in figures)


def test_a_repeat_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "planner", "--repeat", "0"]) == 2
    assert "--repeat: must be at least 1" in capsys.readouterr().err


def test_the_default_sizes_are_the_documented_ones() -> None:
    assert planner.SIZES == ((32, 4), (1024, 64), (1024, 1024), (4096, 512), (32768, 4096))
    assert json.loads(json.dumps(planner.CASES)) == ["fresh", "join", "leave"]


def test_lag_cases_carry_a_backlog_and_start_balanced() -> None:
    fresh = planner.scenario_for("fresh", partitions=64, pods=8, weighting="lag")
    assert fresh.options.weighting == "lag"
    assert len(fresh.lag) == 64
    assert max(fresh.lag.values()) < planner.MAX_LAG
    join = planner.scenario_for("join", partitions=64, pods=8, weighting="lag")
    assert join.lag == fresh.lag
    settled = dataclasses.replace(join, members=join.members[:-1])
    assert not planning.plan(settled).moves, "the starting point is not balanced"
    assert planning.plan(join).moves, "the joining pod gets nothing"
    figures = planner.run(repeat=1, sizes=((64, 8),), weighting="lag")
    assert [f["case"] for f in figures] == ["fresh", "join", "leave"]
