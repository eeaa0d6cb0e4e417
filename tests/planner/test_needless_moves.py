"""No needless moves: sequences of ordinary fleet events played through the planner.

Every move costs the user a pause and possibly a batch processed twice, so a move the change
did not need is a failure. A small simulation plays the operator and the pods: each cycle
plans, writes the assignment back, and the pods acknowledge their revokes (at once or a cycle
later); a terminating pod releases everything on its SIGTERM and leaves once it holds nothing.
Events come one at a time (an *episode*: the event, then cycles until nothing moves), and
each episode is checked against what its change required.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from eventhub_balancer.balancing import models, planning
from tests.planner.test_planning_properties import check_cycle
from tests.support import simulation
from tests.support.simulation import Cycle

P = models.PartitionId
M = models.MemberName
GRACE = 20.0
STEP = 0.1  # seconds between two cycles

# Deterministic and bounded: the same examples on every run, each a few hundred cycles at most.
# EHB_PLANNER_EXAMPLES=5000 for a deeper search before changing the planner.
SEQUENCES = settings(
    max_examples=int(os.environ.get("EHB_PLANNER_EXAMPLES", "300")),
    deadline=None,
    derandomize=True,
)


@dataclasses.dataclass
class Pod:
    state: models.MemberState
    since: float
    starting: bool = False


@dataclasses.dataclass
class Fleet:
    """The operator and the pods, cycle by cycle."""

    partitions: tuple[models.PartitionId, ...]
    pods: dict[str, Pod]
    options: models.Options
    lag: dict[models.PartitionId, int] = dataclasses.field(default_factory=dict)
    #: cycles a pod takes to acknowledge a revoke
    ack_delay: int = 0
    assignment: dict[models.PartitionId, models.Ownership] = dataclasses.field(default_factory=dict)
    now: float = 100.0
    made: int = 0
    #: revoking partition -> cycles since the revoke was written
    pending: dict[models.PartitionId, int] = dataclasses.field(default_factory=dict)
    #: revoking partition -> (its owner, the intended next owner)
    revoked: dict[models.PartitionId, tuple[str, str | None]] = dataclasses.field(
        default_factory=dict
    )
    #: this episode: partition -> its hand-offs (takeovers from an owner to an owner)
    handoffs: Counter[models.PartitionId] = dataclasses.field(default_factory=Counter)
    #: this episode: pod -> the hand-offs it received
    received: Counter[str] = dataclasses.field(default_factory=Counter)
    cycles: list[Cycle] = dataclasses.field(default_factory=list)

    def members(self) -> tuple[models.Member, ...]:
        return tuple(
            models.Member(name=M(n), state=p.state, since=p.since, starting=p.starting)
            for n, p in self.pods.items()
        )

    def scenario(self) -> models.Scenario:
        released: dict[models.PartitionId, int] = {}
        for p, o in self.assignment.items():
            pod = self.pods.get(o.owner) if o.owner is not None else None
            if pod is None:
                continue
            if pod.state == "terminating":
                released[p] = o.epoch  # the consumer releases everything on SIGTERM
            elif (
                o.state == "revoking"
                and pod.state == "ready"
                and self.pending.get(p, 0) >= self.ack_delay
            ):
                released[p] = o.epoch
        return models.Scenario(
            partitions=self.partitions,
            members=self.members(),
            assignment=dict(self.assignment),
            released=released,
            lag=self.lag,
            now=self.now,
            options=self.options,
        )

    def cycle(self) -> models.Plan:
        scenario = self.scenario()
        plan = planning.plan(scenario)
        self.cycles.append(Cycle(scenario=scenario, plan=plan))
        check_cycle(self.cycles[-1])
        live = {m.name for m in simulation.live_members(scenario)}
        for m in plan.moves:
            if m.kind == "revoke" and m.source is not None:
                self.revoked[m.partition] = (m.source, m.target)
            elif m.source is not None and m.target is not None:
                self.handoffs[m.partition] += 1
                self.received[m.target] += 1
                before = self.revoked.get(m.partition)
                if before is not None and before[0] == m.target:
                    # Back to the pod it was revoked from: only if the pod it was meant for
                    # is no longer there to take it.
                    assert before[1] not in live, (
                        f"{m.partition}: revoked from {m.target} for {before[1]}, "
                        f"given back to {m.target} at epoch {m.epoch}"
                    )
            if m.kind != "revoke":
                self.revoked.pop(m.partition, None)
        self.assignment = dict(plan.assignment)
        self.pending = {
            p: self.pending.get(p, -1) + 1
            for p, o in self.assignment.items()
            if o.state == "revoking"
        }
        holders = {o.owner for o in self.assignment.values()}
        for name in [n for n, p in self.pods.items() if p.state == "terminating"]:
            if name not in holders:
                del self.pods[name]  # exited
        self.now += STEP
        return plan

    def settle(self) -> None:
        """Cycles until one moves nothing and nothing is in flight."""
        for _ in range(4 * len(self.partitions) + 20):
            plan = self.cycle()
            in_flight = any(o.state == "revoking" for o in self.assignment.values())
            terminating = any(p.state == "terminating" for p in self.pods.values())
            if not plan.moves and not in_flight and not terminating:
                return
        raise AssertionError("no steady state")

    def add(self, *, ready: bool) -> str:
        name = f"pod-{self.made}"
        self.made += 1
        state: models.MemberState = "ready" if ready else "notready"
        self.pods[name] = Pod(state=state, since=self.now, starting=not ready)
        return name

    def ready(self, name: str) -> None:
        self.pods[name] = Pod(state="ready", since=self.now)

    def live(self) -> list[str]:
        return [n for n, p in self.pods.items() if p.state == "ready"]


# -- events -----------------------------------------------------------------------------------
# Each returns how many hand-offs its episode may take at most beyond the lower bound of the
# change (the partitions that must change owner to reach balance from where it started).


def join(fleet: Fleet, count: int, staggered: bool) -> int:
    """A scale-out: pods created at once, Ready one per cycle or together."""
    new = [fleet.add(ready=False) for _ in range(count)]
    fleet.cycle()
    for name in new:
        fleet.ready(name)
        if staggered:
            fleet.cycle()
    return 0


def leave(fleet: Fleet, count: int, staggered: bool) -> int:
    """A scale-in: pods deleted, the newest first, as a ReplicaSet picks them (staggered: a
    cycle apart, each one's release seen before the next deletion)."""
    victims = sorted(fleet.live(), key=lambda n: (-fleet.pods[n].since, -int(n[4:])))[:count]
    return _one_by_one(fleet, victims, staggered, crash=False)


def crash(fleet: Fleet, count: int, staggered: bool) -> int:
    """Pods gone without a release (node lost, pod force-deleted)."""
    return _one_by_one(fleet, fleet.live()[:count], staggered, crash=True)


def _one_by_one(fleet: Fleet, victims: list[str], staggered: bool, *, crash: bool) -> int:
    for name in victims:
        if crash:
            del fleet.pods[name]
        else:
            fleet.pods[name] = Pod(state="terminating", since=fleet.now)
        if staggered:
            fleet.cycle()
            fleet.cycle()
    # What went to a pod that left next had to move again: nobody knew it was next.
    return sum(fleet.received[name] for name in victims)


def flap(fleet: Fleet, count: int, staggered: bool) -> int:
    """Pods NotReady for a moment (a failed probe, a container restarted in place), Ready
    again well within podGraceSeconds."""
    names = fleet.live()[:count]
    for name in names:
        fleet.pods[name] = Pod(state="notready", since=fleet.now, starting=True)
        if staggered:
            fleet.cycle()
    for _ in range(3):
        fleet.cycle()
    for name in names:
        fleet.ready(name)
    return 0


def join_and_leave(fleet: Fleet, count: int, staggered: bool) -> int:
    """Pods that turn Ready and are gone before anything was handed to them."""
    new = [fleet.add(ready=True) for _ in range(count)]
    plan = fleet.cycle()
    for name in new:
        if staggered:
            fleet.pods[name] = Pod(state="terminating", since=fleet.now)
        else:
            del fleet.pods[name]
    # A started hand-off is never cancelled: each revoke for them costs one hand-off.
    return sum(1 for m in plan.moves if m.kind == "revoke" and m.target in new)


def during_flap(event: str) -> Event:
    def both(fleet: Fleet, count: int, staggered: bool) -> int:
        """A pod NotReady for a moment (its container restarted in place) while `event`
        happens to the others."""
        down = fleet.live()[0]
        fleet.pods[down] = Pod(state="notready", since=fleet.now, starting=True)
        fleet.cycle()
        holding = Counter(o.owner for o in fleet.assignment.values())
        before = set(fleet.pods)
        allowance = EVENTS[event](fleet, count, staggered)
        for _ in range(3):
            fleet.cycle()
        fleet.ready(down)
        # The partitions of pods that left while it was away had to go to the others, and
        # part of them moves on to it when it is back.
        return allowance + sum(holding[name] for name in before - set(fleet.pods))

    return both


Event = Callable[[Fleet, int, bool], int]
EVENTS: dict[str, Event] = {
    "join": join,
    "leave": leave,
    "crash": crash,
    "flap": flap,
    "join_and_leave": join_and_leave,
}
EVENTS.update({f"flap+{kind}": during_flap(kind) for kind in ("join", "leave", "crash")})


def lower_bound(fleet: Fleet, start: dict[models.PartitionId, models.Ownership]) -> int:
    """The fewest owner changes from `start` to balance over the pods there are now."""
    scenario = models.Scenario(
        partitions=fleet.partitions,
        members=tuple(models.Member(name=M(n), state="ready") for n in fleet.live()),
        assignment=start,
        options=models.Options(pod_grace_seconds=GRACE),
    )
    return simulation.lower_bound(scenario)


def play(fleet: Fleet, events: list[tuple[str, int, bool]]) -> None:
    fleet.settle()
    for kind, count, staggered in events:
        if kind.endswith(("leave", "crash")) and len(fleet.live()) <= count + 1:
            continue
        start = dict(fleet.assignment)
        fleet.handoffs.clear()
        fleet.received.clear()
        allowance = EVENTS[kind](fleet, count, staggered)
        fleet.settle()
        episode = f"{kind} x{count}{' staggered' if staggered else ''}"
        # Idempotent: the result planned again plans nothing.
        again = planning.plan(fleet.scenario())
        assert not again.moves, f"{episode}: planning the result again moves {again.moves}"
        if fleet.options.weighting == "lag":
            continue
        assert fleet.cycles[-1].plan.balanced, f"{episode}: not balanced"
        bound = lower_bound(fleet, start) + allowance
        total = sum(fleet.handoffs.values())
        twice = {p: n for p, n in fleet.handoffs.items() if n > 1}
        assert not twice or allowance, f"{episode}: moved more than once: {twice}"
        assert total <= bound, f"{episode}: {total} hand-offs where {bound} suffice"


def fleet_of(
    partitions: int,
    pods: int,
    *,
    ack_delay: int = 0,
    weighting: models.Weighting = "count",
    lag_tolerance: float = models.DEFAULT_LAG_TOLERANCE,
) -> Fleet:
    fleet = Fleet(
        partitions=tuple(P(str(i)) for i in range(partitions)),
        pods={},
        options=models.Options(
            pod_grace_seconds=GRACE, weighting=weighting, lag_tolerance=lag_tolerance
        ),
        ack_delay=ack_delay,
    )
    for _ in range(pods):
        fleet.add(ready=True)
    return fleet


EVENT = st.tuples(st.sampled_from(sorted(EVENTS)), st.integers(1, 3), st.booleans())


@SEQUENCES
@given(
    partitions=st.integers(1, 32),
    pods=st.integers(1, 6),
    ack_delay=st.integers(0, 1),
    events=st.lists(EVENT, min_size=1, max_size=4),
)
def test_each_episode_moves_only_what_its_change_requires(
    partitions: int, pods: int, ack_delay: int, events: list[tuple[str, int, bool]]
) -> None:
    play(fleet_of(partitions, pods, ack_delay=ack_delay), events)


@SEQUENCES
@given(
    partitions=st.integers(1, 24),
    pods=st.integers(1, 5),
    ack_delay=st.integers(0, 1),
    lags=st.lists(st.sampled_from([0, 0, 3, 10, 50, 400]), min_size=24, max_size=24),
    tolerance=st.sampled_from(simulation.TOLERANCES),
    events=st.lists(EVENT, min_size=1, max_size=3),
)
def test_lag_weighting_settles_and_then_moves_nothing(
    partitions: int,
    pods: int,
    ack_delay: int,
    lags: list[int],
    tolerance: float,
    events: list[tuple[str, int, bool]],
) -> None:
    fleet = fleet_of(
        partitions, pods, ack_delay=ack_delay, weighting="lag", lag_tolerance=tolerance
    )
    fleet.lag = {P(str(i)): lags[i] for i in range(partitions)}
    play(fleet, events)


def test_a_join_while_a_pod_restarts_in_place_moves_each_partition_once() -> None:
    # 32 partitions over 4 pods, 8 each; pod-0's container restarts (NotReady for a few
    # seconds) while two pods join. Planned over the Ready pods alone, pod-1..3 gave the
    # newcomers shares of 24 (down to 5, 5, 5) and pod-0, back, handed one of its 8 to pod-1:
    # 11 hand-offs where 10 suffice, a partition moved into a pod that had just given three.
    fleet = fleet_of(32, 4)
    fleet.settle()
    start = dict(fleet.assignment)
    fleet.handoffs.clear()
    during_flap("join")(fleet, 2, False)
    fleet.settle()
    assert fleet.cycles[-1].plan.balanced
    assert sum(fleet.handoffs.values()) == lower_bound(fleet, start) == 10
    # pod-0 kept 6 of its 8, and gave the rest to the new pods only.
    receivers = {fleet.assignment[p].owner for p in fleet.handoffs}
    assert receivers == {"pod-4", "pod-5"}


def test_a_pod_back_from_a_restart_in_place_gives_its_surplus_to_the_pod_that_joined() -> None:
    # The smallest case found: 5 over 2 (3 and 2); pod-0 restarts while pod-2 joins.
    fleet = fleet_of(5, 2)
    fleet.settle()
    start = dict(fleet.assignment)
    fleet.handoffs.clear()
    during_flap("join")(fleet, 1, False)
    fleet.settle()
    assert sum(fleet.handoffs.values()) == lower_bound(fleet, start) == 1
