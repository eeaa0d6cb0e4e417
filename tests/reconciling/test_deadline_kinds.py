"""Every moment the planner names is one at which a decision that stands is taken again.

`deadlines.next_in` (when the cycle wakes) and `deadlines.settled_until` (until when a quiet
decision stands over the same observation) are kept apart, and a kind of the plan's moments
taken into one only was a decision that stood for good: until 7 December a restarted pod's
probation ended with no cycle deciding again, so it got no share until something else changed.
Each ``*_deadlines`` field of `models.Plan` is checked here, so that a new one cannot be left
out of either.
"""

from __future__ import annotations

import dataclasses

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import specs
from eventhub_balancer.reconciling import deadlines
from tests.reconciling import bodies

WALL = 1_000.0
KINDS = sorted(f.name for f in dataclasses.fields(models.Plan) if f.name.endswith("_deadlines"))


def test_the_plan_has_the_kinds_this_test_knows() -> None:
    assert KINDS == [
        "incoming_deadlines",
        "probation_deadlines",
        "release_deadlines",
        "starting_deadlines",
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_decision_stands_until_each_of_the_plans_moments_and_wakes_then(kind: str) -> None:
    spec = specs.parse_spec(bodies.SPEC)
    plan = models.Plan(assignment={}, moves=(), balanced=True, targets={}, **{kind: (WALL + 7.0,)})
    woken = deadlines.next_in(plan=plan, pods={}, spec=spec, wall=WALL)
    stands = deadlines.settled_until(quiet=True, plan=plan, pods={}, spec=spec, wall=WALL)
    assert (woken, stands) == (7.0, WALL + 7.0)


@pytest.mark.parametrize("kind", KINDS)
def test_a_moment_past_wakes_nothing(kind: str) -> None:
    spec = specs.parse_spec(bodies.SPEC)
    plan = models.Plan(
        assignment={}, moves=(), balanced=True, targets={}, **{kind: (WALL - 700.0,)}
    )
    assert deadlines.next_in(plan=plan, pods={}, spec=spec, wall=WALL) is None
