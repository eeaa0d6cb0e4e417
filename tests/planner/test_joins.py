"""A burst of joins is planned once: the pods known to be starting count in the targets.

Pods of a scale-out turn Ready a few tenths of a second apart, each in a cycle of its own. If
each cycle planned over the Ready pods alone, the first new pod would get a share of the old
pods' partitions that the next ones then take from it again. Counted as starting, each new
pod's share stays with the old owners until it is Ready, and every partition moves once,
straight to its final owner.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

from eventhub_balancer.balancing import models, planning

P = models.PartitionId
M = models.MemberName
PARTITIONS = tuple(P(str(i)) for i in range(32))
GRACE = 20.0


def _held_by(owners: dict[str, Iterable[int]]) -> dict[models.PartitionId, models.Ownership]:
    return {
        P(str(p)): models.Ownership(owner=M(o), epoch=1) for o, ps in owners.items() for p in ps
    }


def _member(name: str, *, ready: bool, since: float = 0.0) -> models.Member:
    if ready:
        return models.Member(name=M(name), state="ready", since=since)
    return models.Member(name=M(name), state="notready", since=since, starting=True)


@dataclasses.dataclass
class Walk:
    """A consumer walked through cycles: each plan applied, each revoke acknowledged at once."""

    assignment: dict[models.PartitionId, models.Ownership]
    #: partition -> how many times it changed from one pod to another
    moved: Counter[models.PartitionId] = dataclasses.field(default_factory=Counter)
    plans: list[models.Plan] = dataclasses.field(default_factory=list)

    def cycle(
        self,
        members: Iterable[models.Member],
        *,
        now: float,
        partitions: tuple[models.PartitionId, ...] = PARTITIONS,
        idle: frozenset[models.PartitionId] = frozenset(),
    ) -> models.Plan:
        released = {p: o.epoch for p, o in self.assignment.items() if o.state == "revoking"}
        plan = planning.plan(
            models.Scenario(
                partitions=partitions,
                members=tuple(members),
                assignment=self.assignment,
                released=released,
                idle=idle,
                now=now,
                options=models.Options(pod_grace_seconds=GRACE),
            )
        )
        for m in plan.moves:
            if m.kind != "revoke" and m.source is not None and m.target is not None:
                self.moved[m.partition] += 1
        self.assignment = dict(plan.assignment)
        self.plans.append(plan)
        return plan

    def holdings(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for p, o in self.assignment.items():
            assert o.owner is not None
            assert o.state == "owned"
            result.setdefault(o.owner, []).append(int(p))
        return {name: sorted(ps) for name, ps in sorted(result.items())}


def test_a_scale_out_whose_pods_turn_ready_one_by_one_moves_each_partition_once() -> None:
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    new = ["c", "d", "e", "f"]
    ready: set[str] = set()
    now = 100.0

    def members() -> list[models.Member]:
        return [
            _member("a", ready=True),
            _member("b", ready=True),
            *(_member(n, ready=n in ready, since=100.0) for n in new),
        ]

    # Created and starting: nobody is Ready to take anything, so nothing moves yet.
    assert walk.cycle(members(), now=now).moves == ()
    for name in new:
        now += 0.3
        ready.add(name)
        walk.cycle(members(), now=now)  # the pod turned Ready: revokes
        now += 0.1
        walk.cycle(members(), now=now)  # the acknowledgements: takeovers
    assert walk.plans[-1].balanced
    # 32 over 6: the old pods keep 6 each, the new ones take 5 each, and 20 moves suffice.
    assert sum(walk.moved.values()) == 20
    assert max(walk.moved.values()) == 1
    counts = {name: len(ps) for name, ps in walk.holdings().items()}
    assert counts == {"a": 6, "b": 6, "c": 5, "d": 5, "e": 5, "f": 5}
    # The old pods keep what one plan over all six would have left them.
    at_once = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    everyone = [_member(n, ready=True) for n in ("a", "b", *new)]
    for step in range(3):
        at_once.cycle(everyone, now=100.0 + step)
    assert walk.holdings()["a"] == at_once.holdings()["a"] == list(range(6))
    assert walk.holdings()["b"] == at_once.holdings()["b"] == list(range(16, 22))


def test_a_starting_pod_holds_nothing_and_its_share_waits_only_for_the_grace_period() -> None:
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    members = [_member("a", ready=True), _member("b", ready=True), _member("c", ready=True)]
    stuck = _member("d", ready=False, since=100.0)
    # NotReady and holding nothing, but on no node yet (unschedulable): not counted.
    members.append(models.Member(name=M("e"), state="notready", since=100.0))
    plan = walk.cycle([*members, stuck], now=100.0)
    # c gets its share of four (32 over a, b, c and d: 8 each); d's share stays with a and b.
    assert [(m.kind, m.target) for m in plan.moves] == [("revoke", "c")] * 8
    assert plan.starting == ("d",)
    assert not plan.balanced
    walk.cycle([*members, stuck], now=100.5)
    assert walk.holdings() == {
        "a": list(range(12)),
        "b": list(range(16, 28)),
        "c": [12, 13, 14, 15, 28, 29, 30, 31],
    }
    # Never Ready within podGraceSeconds: d no longer counts, and the Ready pods share all.
    late = walk.cycle([*members, stuck], now=100.0 + GRACE)
    assert late.starting == ()
    assert {m.target for m in late.moves} == {"c"}
    walk.cycle([*members, stuck], now=100.5 + GRACE)
    counts = {name: len(ps) for name, ps in walk.holdings().items()}
    assert counts == {"a": 11, "b": 11, "c": 10}
    assert "d" not in {o.owner for o in walk.assignment.values()}


def test_partitions_listed_during_a_burst_are_given_out_at_once_and_moved_at_most_once() -> None:
    # c turns Ready in the cycle that first lists 40 partitions instead of 32, while d starts.
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    grown = tuple(P(str(i)) for i in range(40))
    ready: set[str] = set()

    def members() -> list[models.Member]:
        return [
            _member("a", ready=True),
            _member("b", ready=True),
            *(_member(n, ready=n in ready, since=0.5) for n in ("c", "d")),
        ]

    walk.cycle(members(), now=1.0)
    ready.add("c")
    plan = walk.cycle(members(), now=1.3, partitions=grown)
    # Loose partitions never wait for a pod that is not Ready: all 40 have an owner now.
    assert all(plan.assignment[p].owner is not None for p in grown)
    walk.cycle(members(), now=1.4, partitions=grown)
    ready.add("d")
    walk.cycle(members(), now=1.6, partitions=grown)
    walk.cycle(members(), now=1.7, partitions=grown)
    assert walk.plans[-1].balanced
    # 40 over 4: a and b give up 6 each, the lower bound; none moves twice.
    assert sum(walk.moved.values()) == 12
    assert max(walk.moved.values()) == 1
    assert [len(ps) for ps in walk.holdings().values()] == [10, 10, 10, 10]


def test_a_fresh_start_gives_each_pod_its_share_once() -> None:
    # Two pods of a new consumer turn Ready 0.3 s apart: the first takes up only its share, and
    # the second's share waits for it rather than passing through the first.
    walk = Walk({})
    members = [_member("a", ready=True), _member("b", ready=False, since=100.0)]
    first = walk.cycle(members, now=100.3)
    assert {m.target for m in first.moves} == {"a"}
    assert len(first.assignment) == 16
    assert first.starting == ("b",)
    assert not first.balanced
    plan = walk.cycle([_member("a", ready=True), _member("b", ready=True)], now=100.6)
    assert {m.target for m in plan.moves} == {"b"}
    assert plan.balanced
    assert not walk.moved, "a partition changed pod"
    assert walk.holdings() == {"a": list(range(16)), "b": list(range(16, 32))}


def test_the_first_ready_pod_of_a_burst_gets_its_whole_share_in_one_cycle() -> None:
    # 32 over 3: two shares of 11, one of 10. z turns Ready first and sorts last by name: the
    # extra goes to it at once, not in the next cycle once it holds 10 (two Events and two
    # ConfigMap writes for one share).
    walk = Walk({})
    members = [
        _member("z", ready=True),
        _member("a", ready=False, since=100.0),
        _member("b", ready=False, since=100.0),
    ]
    first = walk.cycle(members, now=100.3)
    assert sum(o.owner == "z" for o in first.assignment.values()) == 11
    assert walk.cycle(members, now=100.4).moves == ()
    members[1] = _member("a", ready=True, since=100.5)
    walk.cycle(members, now=100.5)
    assert walk.cycle(members, now=100.6).moves == ()
    members[2] = _member("b", ready=True, since=100.7)
    walk.cycle(members, now=100.7)
    assert walk.plans[-1].balanced
    assert not walk.moved, "a partition changed pod"
    assert {n: len(ps) for n, ps in walk.holdings().items()} == {"a": 11, "b": 10, "z": 11}


def test_a_fresh_starts_waiting_share_goes_to_the_ready_pods_after_the_grace_period() -> None:
    walk = Walk({})
    members = [_member("a", ready=True), _member("b", ready=False, since=100.0)]
    walk.cycle(members, now=100.3)
    walk.cycle(members, now=100.0 + GRACE - 0.1)
    assert len(walk.assignment) == 16
    # b never turned Ready: it no longer counts, and a takes everything.
    late = walk.cycle(members, now=100.0 + GRACE)
    assert late.starting == ()
    assert late.balanced
    assert walk.holdings() == {"a": list(range(32))}


def test_pods_slower_to_start_than_the_grace_period_still_join_as_one_burst() -> None:
    # Spark pods: created at 100, the first Ready 40 s later, past podGraceSeconds (20 s)
    # since they came up; the others follow a moment later.
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    new = ["c", "d", "e", "f"]
    ready: dict[str, float] = {}

    def members() -> list[models.Member]:
        return [
            _member("a", ready=True),
            _member("b", ready=True),
            *(_member(n, ready=n in ready, since=ready.get(n, 100.0)) for n in new),
        ]

    now = 140.0
    for name in new:
        ready[name] = now
        plan = walk.cycle(members(), now=now)
        # The rest count from the first Ready (140), and the cycle comes back when they stop.
        assert plan.starting == tuple(n for n in new if n not in ready)
        assert plan.starting_deadlines == ((160.0,) if plan.starting else ())
        walk.cycle(members(), now=now + 0.1)
        now += 0.3
    assert walk.plans[-1].balanced
    assert sum(walk.moved.values()) == 20
    assert max(walk.moved.values()) == 1


def test_a_pod_of_a_slow_burst_that_never_turns_ready_counts_one_grace_after_the_first() -> None:
    # c came up with d at 100 and turned Ready at 140; d never does.
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    c = _member("c", ready=True, since=140.0)
    stuck = _member("d", ready=False, since=100.0)
    members = [_member("a", ready=True), _member("b", ready=True), c, stuck]
    assert walk.cycle(members, now=140.0).starting == ("d",)
    assert walk.cycle(members, now=159.9).starting == ("d",)
    late = walk.cycle(members, now=160.0)
    assert late.starting == ()
    assert late.starting_deadlines == ()


def _ownerless(epoch: int) -> dict[models.PartitionId, models.Ownership]:
    return {p: models.Ownership(owner=None, epoch=epoch) for p in PARTITIONS}


def test_a_scale_up_from_zero_gives_each_pod_its_share_once() -> None:
    # Scaled to zero, every partition kept its epoch on an ownerless entry that no pod's
    # ConfigMap names (idle). Two pods turn Ready 0.3 s apart, as on a fresh start.
    walk = Walk(_ownerless(epoch=5))
    members = [_member("a", ready=True), _member("b", ready=False, since=100.0)]
    first = walk.cycle(members, now=100.3, idle=frozenset(PARTITIONS))
    assert {m.target for m in first.moves} == {"a"}
    assert sum(o.owner == "a" for o in first.assignment.values()) == 16
    assert first.starting == ("b",)
    assert all(o.epoch == 6 for o in first.assignment.values() if o.owner is not None)
    waiting = [p for p, o in first.assignment.items() if o.owner is None]
    assert len(waiting) == 16
    assert all(first.assignment[p].epoch == 5 for p in waiting), "an ownerless epoch went back"
    idle = frozenset(waiting)  # still named by no ConfigMap
    walk.cycle([_member("a", ready=True), _member("b", ready=True)], now=100.6, idle=idle)
    assert walk.plans[-1].balanced
    assert not walk.moved, "a partition changed pod"
    assert walk.holdings() == {"a": list(range(16)), "b": list(range(16, 32))}


def test_ownerless_partitions_a_pod_still_processes_do_not_wait_for_a_starting_pod() -> None:
    # A consumer created again: its record is gone, so every partition is ownerless, but the
    # pods' ConfigMaps still name them (not idle): processed a moment ago, they go to the
    # Ready pod at once, as a gone pod's do.
    walk = Walk(_ownerless(epoch=5))
    members = [_member("a", ready=True), _member("b", ready=False, since=100.0)]
    plan = walk.cycle(members, now=100.3)
    assert all(o.owner == "a" for o in plan.assignment.values())


def test_a_gone_pods_partitions_do_not_wait_for_its_replacement() -> None:
    # b was killed; its replacement c is starting. b's partitions were processed a moment
    # ago and are falling behind: they go to a at once, and c takes its share when Ready.
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    members = [_member("a", ready=True), _member("c", ready=False, since=100.0)]
    plan = walk.cycle(members, now=100.2)
    assert all(o.owner == "a" for o in plan.assignment.values())
    assert len(plan.assignment) == 32


def test_new_partitions_wait_for_a_starting_pod_when_the_ready_pods_are_full() -> None:
    # The hub grows from 32 to 40 while c starts: a and b already hold their shares of 40 over
    # three (14, 13) and more, so the 8 new partitions are c's to take when it is Ready.
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    grown = tuple(P(str(i)) for i in range(40))
    members = [_member("a", ready=True), _member("b", ready=True)]
    plan = walk.cycle(
        [*members, _member("c", ready=False, since=100.0)], now=100.1, partitions=grown
    )
    assert [p for p in grown if p not in plan.assignment] == [P(str(i)) for i in range(32, 40)]
    walk.cycle([*members, _member("c", ready=True)], now=100.4, partitions=grown)
    walk.cycle([*members, _member("c", ready=True)], now=100.5, partitions=grown)
    assert walk.plans[-1].balanced
    assert max(walk.moved.values(), default=0) == 1
    assert sorted(len(ps) for ps in walk.holdings().values()) == [13, 13, 14]


def test_what_is_released_goes_to_the_pod_that_turned_ready_first_whatever_its_name() -> None:
    # z turned Ready first and its share was revoked for it (3 and 7, released now); a turned
    # Ready after. z takes 3 and 7; a's share is revoked in the same cycle.
    eight = tuple(P(str(i)) for i in range(8))
    assignment = _held_by({"x": [0, 1, 2], "y": [4, 5, 6]})
    for p, owner in (("3", "x"), ("7", "y")):
        assignment[P(p)] = models.Ownership(owner=M(owner), epoch=1, state="revoking", since=100.0)
    plan = planning.plan(
        models.Scenario(
            partitions=eight,
            members=(
                _member("x", ready=True),
                _member("y", ready=True),
                _member("z", ready=True, since=100.0),
                _member("a", ready=True, since=101.0),
            ),
            assignment=assignment,
            released={P("3"): 1, P("7"): 1},
            now=101.5,
            options=models.Options(pod_grace_seconds=GRACE),
        )
    )
    given = {m.partition: m.target for m in plan.moves if m.kind == "takeover"}
    assert given == {"3": "z", "7": "z"}
    revoked = {m.partition: m.target for m in plan.moves if m.kind == "revoke"}
    assert revoked == {"2": "a", "6": "a"}


def test_a_hand_off_that_ends_first_goes_where_its_revoke_said() -> None:
    """Two pods joined two on the local stack: the operator revoked 8-15 for c and 24-31 for
    d, the second owner released first, and 24-31 went to c, then 8-15 to d. Each went to the
    pod the other's revoke had named: the released partitions were placed before those still
    in flight, whatever order they were revoked in."""
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    members = [
        _member("a", ready=True),
        _member("b", ready=True),
        _member("c", ready=True, since=10.0),
        _member("d", ready=True, since=11.0),
    ]
    revoked = walk.cycle(members, now=12.0)
    said = {m.partition: m.target for m in revoked.moves if m.kind == "revoke"}
    assert said == {P(str(p)): M("c" if p < 16 else "d") for p in (*range(8, 16), *range(24, 32))}
    # b releases 24-31; a's release of 8-15 is still to come.
    plan = planning.plan(
        models.Scenario(
            partitions=PARTITIONS,
            members=tuple(members),
            assignment=walk.assignment,
            released={P(str(p)): 1 for p in range(24, 32)},
            now=12.5,
            options=models.Options(pod_grace_seconds=GRACE),
        )
    )
    assert {plan.assignment[P(str(p))].owner for p in range(24, 32)} == {"d"}
    assert {plan.assignment[P(str(p))].state for p in range(8, 16)} == {"revoking"}
    walk.assignment = dict(plan.assignment)
    walk.cycle(members, now=13.0)
    assert walk.holdings() == {
        "a": list(range(8)),
        "b": list(range(16, 24)),
        "c": list(range(8, 16)),
        "d": list(range(24, 32)),
    }


def test_pods_ready_in_the_same_second_are_taken_in_the_order_they_were_seen() -> None:
    """Right after the fix above, on the local stack: h82gz and bx6m9 turned Ready in the same
    second (the Ready condition's time is to the second). The first cycle saw h82gz alone and
    revoked 12-15 and 28-31 for it; the next saw both, ordered them by name, handed those to
    bx6m9 and revoked 8-11 and 24-27 for h82gz instead. The operator's first sighting of each
    Ready orders them."""
    walk = Walk(_held_by({"a": range(16), "b": range(16, 32)}))
    old = [_member("a", ready=True), _member("b", ready=True)]
    first = dataclasses.replace(_member("h", ready=True, since=23.0), seen=24.02)
    second = _member("c", ready=False, since=22.0)
    revoked = walk.cycle([*old, first, second], now=24.02)
    said = {m.partition: m.target for m in revoked.moves if m.kind == "revoke"}
    assert set(said.values()) == {"h"}
    both = [*old, first, dataclasses.replace(second, state="ready", since=23.0, seen=24.1)]
    walk.cycle(both, now=24.1)  # their releases come in (each acknowledged at once)
    assert {walk.assignment[p].owner for p in said} == {"h"}
    for _ in range(3):
        walk.cycle(both, now=25.0)
    assert {int(p) for p, o in walk.assignment.items() if o.owner == "h"} == {int(p) for p in said}
    assert max(walk.moved.values()) == 1
