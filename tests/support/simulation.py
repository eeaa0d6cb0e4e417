"""Random scenarios and a cycle-by-cycle replay of the planner, for the property tests.

The replay plays the part of the operator and the pods: it writes each plan's assignment
back, acknowledges every revoke at once and plans again, until nothing moves. The checks
compare what each cycle did with what the rules allow.
"""

from __future__ import annotations

import dataclasses
import fractions
import math

from hypothesis import strategies as st

from eventhub_balancer.balancing import models, planning

NAMES = tuple(models.MemberName(f"pod-{i}") for i in range(10))
NOW = 100.0
TOLERANCES = (0.0, 0.1, 0.25, 0.25, 1.0, 3.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cycle:
    scenario: models.Scenario
    plan: models.Plan


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    revoking: bool = True,
    equal_weights: bool = False,
    weighting: models.Weighting = "count",
    max_partitions: int = 40,
    starting: bool = False,
) -> models.Scenario:
    """Any scenario the operator may meet: members in every state, owners gone, revokes
    in flight, vanished and new partitions, caps; with ``starting``, NotReady members that
    may be starting (`models.Member.starting`) and idle ownerless entries."""
    count = draw(st.integers(0, max_partitions))
    partitions = [models.PartitionId(str(p)) for p in range(count)]
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=8))
    weight_choices = (1.0,) if equal_weights else (0.5, 1.0, 1.0, 2.0, 3.0)
    members = tuple(
        models.Member(
            name=name,
            state=draw(st.sampled_from(["ready", "ready", "ready", "notready", "terminating"])),
            since=draw(st.sampled_from([0.0, 70.0, 95.0, NOW])),
            weight=draw(st.sampled_from(weight_choices)),
            starting=starting and draw(st.booleans()),
        )
        for name in names
    )
    owners: list[models.MemberName | None] = [None, *NAMES]
    assignment: dict[models.PartitionId, models.Ownership] = {}
    released: dict[models.PartitionId, int] = {}
    vanished = [models.PartitionId(str(p)) for p in range(count, count + draw(st.integers(0, 2)))]
    for p in partitions + vanished:
        if not draw(st.booleans()) and p not in vanished:
            continue
        owner = draw(st.sampled_from(owners))
        epoch = draw(st.integers(0 if owner is None else 1, 9))
        state: models.OwnershipState = "owned"
        if revoking and owner is not None and draw(st.integers(0, 3)) == 0:
            state = "revoking"
            if draw(st.booleans()):
                # The current epoch completes the hand-off; an older one must not.
                released[p] = draw(st.sampled_from([epoch, epoch - 1]))
        assignment[p] = models.Ownership(
            owner=owner, epoch=epoch, state=state, since=draw(st.sampled_from([0.0, 80.0, NOW]))
        )
    # Ownerless entries no pod's ConfigMap names (a scale up from zero) wait like new ones.
    idle = frozenset(
        p for p, o in assignment.items() if starting and o.owner is None and draw(st.booleans())
    )
    lag = {}
    if weighting == "lag":
        lag = {p: draw(st.sampled_from([0, 0, 3, 10, 50, 400])) for p in partitions}
    return models.Scenario(
        partitions=tuple(partitions),
        members=members,
        assignment=assignment,
        released=released,
        lag=lag,
        idle=idle,
        now=NOW,
        options=models.Options(
            pod_grace_seconds=20.0,
            handoff_timeout_seconds=draw(st.sampled_from([0.0, 30.0])),
            max_moves_per_cycle=draw(st.sampled_from([0, 0, 1, 3])),
            weighting=weighting,
            lag_tolerance=draw(st.sampled_from(TOLERANCES)) if weighting == "lag" else 0.25,
        ),
    )


def replay(scenario: models.Scenario) -> list[Cycle]:
    """Plan, write back, acknowledge every revoke, plan again, until nothing changes. A
    terminating member releases everything it owns, as the consumer runtime does on SIGTERM."""
    cycles: list[Cycle] = []
    terminating = {m.name for m in scenario.members if m.state == "terminating"}
    # Every rebalancing revoke costs at most two cycles, and at least one starts per cycle.
    for _ in range(2 * len(scenario.partitions) + 6):
        plan = planning.plan(scenario)
        cycles.append(Cycle(scenario=scenario, plan=plan))
        letting_go = {
            p: e.epoch
            for p, e in plan.assignment.items()
            if e.state == "revoking" or (e.owner in terminating and e.owner is not None)
        }
        if not plan.moves and not letting_go:
            return cycles
        scenario = dataclasses.replace(scenario, assignment=plan.assignment, released=letting_go)
    raise AssertionError(f"no steady state after {len(cycles)} cycles")


def standing(scenario: models.Scenario, name: models.MemberName | None) -> planning.Standing:
    members = {m.name: m for m in scenario.members}
    member = members.get(name) if name is not None else None
    return planning.standing(member, now=scenario.now, options=scenario.options)


def live_members(scenario: models.Scenario) -> list[models.Member]:
    return [m for m in scenario.members if standing(scenario, m.name) == "live"]


def owners(
    scenario: models.Scenario, assignment: dict[models.PartitionId, models.Ownership] | None = None
) -> dict[models.PartitionId, models.MemberName | None]:
    """Partition -> owner over the scenario's partitions (None: no owner or no entry)."""
    entries = scenario.assignment if assignment is None else assignment
    return {p: (entries[p].owner if p in entries else None) for p in scenario.partitions}


def lower_bound(scenario: models.Scenario) -> int:
    """The fewest owner changes that reach balance (equal weights, no revoke in flight):
    every partition that has no live or held owner, plus the surplus above the targets
    when the extra partitions go to the members that hold the most. A held member counts
    in the targets up to what it holds: what it keeps above its share is the live members'
    once it is back, and nothing moves among them meanwhile to make up for it."""
    live = {m.name for m in live_members(scenario)}
    held = {m.name for m in scenario.members if standing(scenario, m.name) == "held"}
    counts = dict.fromkeys(live, 0)
    keeps = dict.fromkeys(held, 0)
    loose = 0
    for owner in owners(scenario).values():
        if owner in live:
            counts[owner] += 1
        elif owner in held:
            keeps[owner] += 1
        elif owner is not None or live:
            loose += 1
    if not live:
        return loose
    carried = len(scenario.partitions)
    if any(keeps.values()):
        # The split with the held members: the extras to those holding the most, then by name.
        stakes = {**counts, **{n: c for n, c in keeps.items() if c}}
        base, extra = divmod(len(scenario.partitions), len(stakes))
        ranked = sorted(stakes, key=lambda n: (-stakes[n], models.name_key(n)))
        carried -= sum(min(keeps[n], base + (ranked.index(n) < extra)) for n in keeps if keeps[n])
    floor, extra = divmod(carried, len(live))
    above = [c for c in counts.values() if c > floor]
    return loose + sum(c - floor for c in above) - min(extra, len(above))


def loads(
    scenario: models.Scenario, assignment: dict[models.PartitionId, models.Ownership]
) -> dict[models.MemberName, int]:
    """Live member -> the sum of lag + 1 over what it owns."""
    result = {m.name: 0 for m in live_members(scenario)}
    for p, entry in assignment.items():
        if entry.owner in result:
            result[entry.owner] += scenario.lag.get(p, 0) + 1
    return result


def exact_share(scenario: models.Scenario, name: models.MemberName, total: int) -> float:
    live = live_members(scenario)
    weight = next(m.weight for m in live if m.name == name)
    return total * weight / math.fsum(m.weight for m in live)


def mean_load(
    scenario: models.Scenario, assignment: dict[models.PartitionId, models.Ownership]
) -> fractions.Fraction:
    """The live members' load per unit of weight (once nothing is loose or in flight)."""
    live = live_members(scenario)
    total = sum(loads(scenario, assignment).values())
    return total / sum((fractions.Fraction(m.weight) for m in live), fractions.Fraction(0))


def material_move(
    scenario: models.Scenario,
    assignment: dict[models.PartitionId, models.Ownership],
    *,
    margin: fractions.Fraction,
) -> tuple[models.PartitionId, models.MemberName, models.MemberName] | None:
    """Any move that is material at `margin` (the rule of the planner, by brute force):
    per unit of weight, the giver stays at least `margin` above the receiver's old load and
    the receiver at least `margin` below the giver's old load (strictly with no margin)."""
    weights = {m.name: fractions.Fraction(m.weight) for m in live_members(scenario)}
    level = {n: load / weights[n] for n, load in loads(scenario, assignment).items()}
    for p, entry in assignment.items():
        if entry.owner not in weights:
            continue
        g, s = entry.owner, scenario.lag.get(p, 0) + 1
        for r in weights:
            if r == g:
                continue
            a = level[g] - s / weights[g] - level[r]
            b = level[g] - level[r] - s / weights[r]
            if (a >= margin and b >= margin) if margin else (a > 0 and b > 0):
                return p, g, r
    return None
