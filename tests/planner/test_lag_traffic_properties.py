"""The guarantees of ``weighting: lag`` (docs/planner.md) with the operator's floors and rates.

`test_lag_damping` checks them on the lags as given (``ehb plan``: a partition weighs lag + 1).
The operator leaves each partition's own floor out of its lag (1000 events, or what it receives
in 10 s when more) and gives every partition the same unit for its traffic, the mean of those
floors: size = max(0, lag - own floor) + unit. Here, over random fleets with a rate for every
partition (one for all, or each its own), the replay plays the operator and the pods on a
clock that runs (so that the operator's 10 s wait after a take-over passes), and checks:

1. the replay ends and planning again, then or later, moves nothing; hand-offs end where the
   revokes said and then nothing moves, with any weights (before, with unequal weights, a
   giver could end so light that a partition it had just shed came back to it);
2. a fleet that keeps up (every lag within its own floor) is planned exactly as if every
   partition weighed the same, whatever the rates: a fresh start is spread as by count (no
   two pods more than one partition apart); from any start it settles with no two pods
   1 + t x P / N partitions apart or more (t = lagTolerance, P partitions, N pods, equal
   weights; at most 1 apart with t = 0): the tolerance, not count's exact spread;
3. rates that waver by 20 % either way move nothing while the lags stay within the floors
   (a lag right at 10 s of the old rate is backlog at a lower one, and weighed as such);
4. the Bound, in these units: load / w <= (1 + t) x m + s_min / min(w, w_min), and no move is
   left material at the full tolerance;
5. one pod's partitions far behind: once settled, a pod that holds a partition that keeps up
   carries less than one unit plus t x m more than any other pod (no material move), so the
   pods that hold only partitions that keep up are fewer than 1 + t x m / unit partitions
   apart; from an even spread they end at most one apart. A pod that takes a partition far
   behind holds that much fewer of the others: counts over all pods are not bounded.
"""

from __future__ import annotations

import dataclasses
import fractions
import math
import os
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from eventhub_balancer.balancing import models, planning
from tests.support import simulation

PROPERTIES = settings(max_examples=int(os.environ.get("EHB_PLANNER_EXAMPLES", "60")), deadline=None)

FLOOR, SECONDS, SETTLE = models.LAG_FLOOR, models.LAG_FLOOR_SECONDS, models.LAG_SETTLE_SECONDS
#: The clock between two of the replay's cycles.
STEP = 5.0
#: Events a second; 0.5 and 99.9 sit just below the floor, 100.0 on it.
RATES = st.sampled_from([0.0, 0.5, 20.0, 99.9, 100.0, 101.0, 250.0, 1000.0, 3000.0])
#: Events behind beyond a partition's own floor: from one event to minutes of traffic.
BACKLOGS = st.sampled_from([1, 50, 999, 5_000, 60_000, 600_000])
WAVER = 0.2


def own_floor(rate: float) -> int:
    return max(FLOOR, math.ceil(rate * SECONDS))


def unit(scenario: models.Scenario) -> int:
    floors = [own_floor(scenario.rates[p]) for p in scenario.partitions]
    return max(1, math.ceil(sum(floors) / len(floors))) if floors else 1


def sizes(scenario: models.Scenario) -> dict[models.PartitionId, int]:
    """What each partition weighs, as docs/planner.md says."""
    u = unit(scenario)
    return {
        p: max(0, scenario.lag.get(p, 0) - own_floor(scenario.rates[p])) + u
        for p in scenario.partitions
    }


def keeps_up(scenario: models.Scenario, p: models.PartitionId) -> bool:
    return scenario.lag.get(p, 0) <= own_floor(scenario.rates[p])


def held(scenario: models.Scenario) -> dict[models.MemberName, list[models.PartitionId]]:
    """Ready member -> the partitions it owns (everything settled: all members are ready)."""
    result: dict[models.MemberName, list[models.PartitionId]] = {
        m.name: [] for m in scenario.members
    }
    for p, entry in scenario.assignment.items():
        if entry.owner is not None:
            result[entry.owner].append(p)
    return result


def loads(scenario: models.Scenario) -> dict[models.MemberName, int]:
    size = sizes(scenario)
    return {name: sum(size[p] for p in ps) for name, ps in held(scenario).items()}


def mean(scenario: models.Scenario) -> fractions.Fraction:
    whole = sum((fractions.Fraction(m.weight) for m in scenario.members), fractions.Fraction(0))
    return sum(loads(scenario).values()) / whole


def material_move(
    scenario: models.Scenario, margin: fractions.Fraction
) -> tuple[models.PartitionId, models.MemberName, models.MemberName] | None:
    """Any move material at `margin`, by brute force (the rule of docs/planner.md)."""
    weights = {m.name: fractions.Fraction(m.weight) for m in scenario.members}
    level = {n: load / weights[n] for n, load in loads(scenario).items()}
    size = sizes(scenario)
    for g, ps in held(scenario).items():
        for p in ps:
            for r in weights:
                if r == g:
                    continue
                a = level[g] - size[p] / weights[g] - level[r]
                b = level[g] - level[r] - size[p] / weights[r]
                if (a >= margin and b >= margin) if margin else (a > 0 and b > 0):
                    return p, g, r
    return None


def replay(scenario: models.Scenario) -> models.Scenario:
    """The operator and the pods: write each plan back, acknowledge every revoke at once, let
    the clock run, until a cycle past the operator's wait moves nothing. Returns that steady
    state (everything released, nothing in flight)."""
    settle = scenario.options.lag_settle_seconds
    # A rebalancing revoke costs two cycles, and the wait after its take-over two more.
    cycles = (2 + math.ceil(settle / STEP)) * (2 * len(scenario.partitions) + 6)
    for _ in range(cycles):
        plan = planning.plan(scenario)
        revoking = {p: e.epoch for p, e in plan.assignment.items() if e.state == "revoking"}
        # Within the wait after a take-over this cycle could start no rebalance.
        recent = scenario.now - settle
        waiting = any(e.owner and e.since > recent for e in scenario.assignment.values())
        if not plan.moves and not revoking and not waiting:
            return dataclasses.replace(scenario, assignment=plan.assignment, released={})
        scenario = dataclasses.replace(
            scenario, assignment=plan.assignment, released=revoking, now=scenario.now + STEP
        )
    raise AssertionError(f"no steady state after {cycles} cycles")


def options(draw: st.DrawFn) -> models.Options:
    return models.Options(
        weighting="lag",
        lag_tolerance=draw(st.sampled_from(simulation.TOLERANCES)),
        lag_floor=FLOOR,
        lag_floor_seconds=SECONDS,
        lag_settle_seconds=draw(st.sampled_from([0.0, SETTLE])),
        handoff_timeout_seconds=30.0,
        max_moves_per_cycle=draw(st.sampled_from([0, 0, 1, 3])),
    )


def lag_within(draw: st.DrawFn, rate: float) -> int:
    return draw(st.sampled_from([0, 1, own_floor(rate) // 2, own_floor(rate)]))


@st.composite
def fleets(
    draw: st.DrawFn,
    *,
    keeping_up: bool = False,
    equal_weights: bool = False,
    fresh: bool = False,
) -> models.Scenario:
    """Ready pods, partitions owned by any of them or by nobody, a rate for every partition
    (one for all, or each its own), lags within their floors or behind them."""
    count = draw(st.integers(1, 40))
    partitions = tuple(models.PartitionId(str(p)) for p in range(count))
    weights = (1.0,) if equal_weights else (0.5, 1.0, 1.0, 2.0, 3.0)
    members = tuple(
        models.Member(name=name, state="ready", weight=draw(st.sampled_from(weights)))
        for name in simulation.NAMES[: draw(st.integers(1, 6))]
    )
    if draw(st.booleans()):
        rates = dict.fromkeys(partitions, draw(RATES))
    else:
        rates = {p: draw(RATES) for p in partitions}
    lag = {
        p: lag_within(draw, rates[p])
        if keeping_up or draw(st.booleans())
        else own_floor(rates[p]) + draw(BACKLOGS)
        for p in partitions
    }
    assignment: dict[models.PartitionId, models.Ownership] = {}
    if not fresh:
        owners = [None, *(m.name for m in members)]
        for p in partitions:
            owner = draw(st.sampled_from(owners))
            if owner is not None:
                assignment[p] = models.Ownership(owner=owner, epoch=1)
    return models.Scenario(
        partitions=partitions,
        members=members,
        assignment=assignment,
        lag=lag,
        rates=rates,
        now=simulation.NOW,
        options=options(draw),
    )


def counts(scenario: models.Scenario) -> list[int]:
    return [len(ps) for ps in held(scenario).values()]


# 1. The replay ends, hand-offs end where the revokes said, and planning again moves nothing.


@PROPERTIES
@given(fleets())
def test_the_steady_state_planned_again_moves_nothing(scenario: models.Scenario) -> None:
    steady = replay(scenario)
    for later in (0.0, STEP, 10 * SETTLE):
        again = planning.plan(dataclasses.replace(steady, now=steady.now + later))
        assert not again.moves
        assert again.assignment == steady.assignment


@PROPERTIES
@given(fleets(), st.data())
def test_handoffs_end_where_the_revokes_said_and_then_nothing_moves(
    scenario: models.Scenario, data: st.DataObject
) -> None:
    # Everything on one pod: a rebalance is due at once unless the tolerance covers it.
    first_pod = scenario.members[0].name
    scenario = dataclasses.replace(
        scenario,
        assignment={p: models.Ownership(owner=first_pod, epoch=1) for p in scenario.partitions},
        options=dataclasses.replace(scenario.options, max_moves_per_cycle=0),
    )
    first = planning.plan(scenario)
    revoked = {m.partition: m.target for m in first.moves if m.kind == "revoke"}
    released = {p: e.epoch for p, e in first.assignment.items() if e.state == "revoking"}
    second = planning.plan(
        dataclasses.replace(
            scenario, assignment=first.assignment, released=released, now=scenario.now + STEP
        )
    )
    assert {m.partition: m.target for m in second.moves} == revoked
    assert all(m.kind == "takeover" for m in second.moves)
    after = data.draw(st.sampled_from([STEP, SETTLE + STEP]), label="after the take-overs")
    third = planning.plan(
        dataclasses.replace(scenario, assignment=second.assignment, now=scenario.now + after)
    )
    assert not third.moves, "the rebalanced state moves again with the same lags and rates"


# 2. A fleet that keeps up is spread as by count, whatever the rates.


def weighing_the_same(scenario: models.Scenario) -> models.Scenario:
    """The scenario with every partition of the same size and no floor (`ehb plan`, no lag)."""
    no_floor = dataclasses.replace(scenario.options, lag_floor=0, lag_floor_seconds=0.0)
    return dataclasses.replace(scenario, lag={}, rates={}, options=no_floor)


@PROPERTIES
@given(fleets(keeping_up=True))
def test_a_fleet_that_keeps_up_is_planned_as_if_every_partition_weighed_the_same(
    scenario: models.Scenario,
) -> None:
    same = weighing_the_same(scenario)
    for _ in range(2 * len(scenario.partitions) + 6):
        plan, reference = planning.plan(scenario), planning.plan(same)
        assert plan.moves == reference.moves
        assert plan.assignment == reference.assignment
        if not plan.moves:
            return
        revoking = {p: e.epoch for p, e in plan.assignment.items() if e.state == "revoking"}
        later = scenario.now + SETTLE
        scenario = dataclasses.replace(
            scenario, assignment=plan.assignment, released=revoking, now=later
        )
        same = dataclasses.replace(same, assignment=plan.assignment, released=revoking, now=later)
    raise AssertionError("no steady state")


@PROPERTIES
@given(fleets(keeping_up=True, equal_weights=True, fresh=True))
def test_a_fresh_fleet_that_keeps_up_is_spread_as_by_count(scenario: models.Scenario) -> None:
    steady = replay(scenario)
    assert max(counts(steady)) - min(counts(steady)) <= 1


@PROPERTIES
@given(fleets(keeping_up=True, equal_weights=True))
def test_a_settled_fleet_that_keeps_up_is_within_the_tolerance_of_count(
    scenario: models.Scenario,
) -> None:
    steady = replay(scenario)
    n, tolerance = len(steady.members), fractions.Fraction(steady.options.lag_tolerance)
    gap = max(counts(steady)) - min(counts(steady))
    assert gap <= 1 if tolerance == 0 else gap < 1 + tolerance * len(steady.partitions) / n


# 3. Rates that waver move nothing while the lags stay within the floors.


@PROPERTIES
@given(fleets(keeping_up=True), st.randoms(use_true_random=False))
def test_wavering_rates_move_nothing_while_the_lags_keep_up(
    scenario: models.Scenario, shaker: random.Random
) -> None:
    steady = replay(scenario)
    for _ in range(3):
        rates = {p: r * (1 + shaker.uniform(-WAVER, WAVER)) for p, r in steady.rates.items()}
        lag = {p: min(n, own_floor(rates[p])) for p, n in steady.lag.items()}
        wavered = dataclasses.replace(steady, rates=rates, lag=lag, now=steady.now + STEP)
        assert not planning.plan(wavered).moves, "a wavering rate moved a partition"


# 4. The Bound, in the new units.


@PROPERTIES
@given(fleets())
def test_no_pod_ends_above_its_tolerated_share(scenario: models.Scenario) -> None:
    steady = replay(scenario)
    tolerance = fractions.Fraction(steady.options.lag_tolerance)
    m = mean(steady)
    assert material_move(steady, tolerance * m) is None, "a move is left material"
    weights = {x.name: fractions.Fraction(x.weight) for x in steady.members}
    size = sizes(steady)
    for name, load in loads(steady).items():
        if not held(steady)[name]:
            continue
        smallest = min(size[p] for p in held(steady)[name])
        bound = (1 + tolerance) * m + smallest / min(weights[name], min(weights.values()))
        assert load / weights[name] <= bound, f"{name} carries {load} over a bound of {bound}"


# 5. One pod's partitions far behind.


@st.composite
def pile_ups(draw: st.DrawFn) -> models.Scenario:
    """Pods that kept up, spread as by count; then the first one falls behind on every
    partition it holds, by seconds to minutes of their traffic."""
    base = draw(fleets(keeping_up=True, equal_weights=True, fresh=True))
    n = len(base.members)
    if n < 3:
        base = dataclasses.replace(
            base, members=tuple(models.Member(name=x, state="ready") for x in simulation.NAMES[:3])
        )
    names = [x.name for x in base.members]
    assignment = {
        p: models.Ownership(owner=names[i % len(names)], epoch=1)
        for i, p in enumerate(base.partitions)
    }
    lag = dict(base.lag)
    for p, entry in assignment.items():
        if entry.owner == names[0]:
            lag[p] = own_floor(base.rates[p]) + draw(BACKLOGS)
    return dataclasses.replace(base, assignment=assignment, lag=lag)


def light(scenario: models.Scenario) -> dict[models.MemberName, int]:
    """Pod -> how many partitions it holds, for the pods whose partitions all keep up."""
    return {
        name: len(ps)
        for name, ps in held(scenario).items()
        if all(keeps_up(scenario, p) for p in ps)
    }


@PROPERTIES
@given(pile_ups())
def test_beside_one_slow_pod_those_that_keep_up_stay_within_the_tolerance(
    scenario: models.Scenario,
) -> None:
    steady = replay(scenario)
    u, m = unit(steady), mean(steady)
    tolerance = fractions.Fraction(steady.options.lag_tolerance)
    load = loads(steady)
    for g, ps in held(steady).items():
        if any(keeps_up(steady, p) for p in ps):
            for r in load:
                if tolerance:
                    assert load[g] - load[r] < u + tolerance * m, (g, r)
                else:
                    assert load[g] - load[r] <= u, (g, r)
    counted = light(steady)
    if len(counted) > 1:
        gap = max(counted.values()) - min(counted.values())
        assert gap <= 1 if tolerance == 0 else gap < 1 + tolerance * m / u


@st.composite
def caught_up(draw: st.DrawFn) -> models.Scenario:
    """A pile-up settled; then the partitions it moved off the slow pod catch up, and those
    it still holds stay behind."""
    steady = replay(draw(pile_ups()))
    slow = steady.members[0].name
    lag = {
        p: n if steady.assignment[p].owner == slow else lag_within(draw, steady.rates[p])
        for p, n in steady.lag.items()
    }
    return dataclasses.replace(steady, lag=lag, now=steady.now + SETTLE)


@PROPERTIES
@given(caught_up())
def test_once_the_moved_partitions_catch_up_those_that_keep_up_stay_within_the_tolerance(
    scenario: models.Scenario,
) -> None:
    # Weighed as one event each, the pods that had taken a backlog kept one partition each
    # beside one pod with all the others (1, 1, 13, 1): a gap of 12 is no material move
    # beside a backlog of thousands of events.
    steady = replay(scenario)
    counted = light(steady)
    tolerance = fractions.Fraction(steady.options.lag_tolerance)
    if len(counted) > 1:
        gap = max(counted.values()) - min(counted.values())
        bound = 1 + tolerance * mean(steady) / unit(steady)
        assert gap <= 1 if tolerance == 0 else gap < bound, (counted, float(bound))
