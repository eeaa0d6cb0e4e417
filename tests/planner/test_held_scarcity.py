"""A NotReady pod in its grace that keeps more than its share: what is free is spread evenly.

Both scenarios were found by the lower-bound property test (`test_planning_properties.py`):
Ready pods, and pod-2 NotReady for 5 s of its 20 s grace, keeping what it holds.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from eventhub_balancer.balancing import models
from tests.planner.test_planning_rules import member, owned, scenario, settle

LIVE = ["pod-0", "pod-3", "pod-4", "pod-5", "pod-6"]
OPTIONS = models.Options(pod_grace_seconds=20.0, handoff_timeout_seconds=0.0)


def in_grace(count: int, live: list[str], assignment: dict[str, str]) -> models.Scenario:
    return scenario(
        count,
        [*(member(n) for n in live), member("pod-2", "notready", since=95.0)],
        {p: owned(o) for p, o in assignment.items()},
        now=100.0,
        options=OPTIONS,
    )


def holding(plan: models.Plan) -> Counter[str | None]:
    return Counter(e.owner for e in plan.assignment.values())


def changes(before: models.Scenario, plan: models.Plan) -> int:
    old = {p: e.owner for p, e in before.assignment.items()}
    return sum(1 for p, e in plan.assignment.items() if old.get(p) != e.owner)


def test_the_free_partitions_go_one_each_before_any_live_pod_gets_a_second() -> None:
    # 8 partitions, pod-2 keeps 3 (its share once back is 2): 5 free for 5 Ready pods.
    s = in_grace(8, LIVE, {"5": "pod-2", "6": "pod-2", "7": "pod-2"})
    plan = settle(s)
    assert holding(plan) == {"pod-2": 3, **dict.fromkeys(LIVE, 1)}
    assert changes(s, plan) == 5
    # What pod-2 holds above its share is still pod-0's: back, pod-2 hands exactly that on.
    assert plan.targets["pod-0"] == 2
    back = dataclasses.replace(
        s, assignment=plan.assignment, members=tuple(member(n) for n in [*LIVE, "pod-2"])
    )
    after = settle(back)
    assert changes(back, after) == 1
    assert holding(after) == {"pod-0": 2, "pod-2": 2, **dict.fromkeys(LIVE[1:], 1)}
    # Never back: its 3 partitions move once each, nothing else moves.
    gone = dataclasses.replace(s, assignment=plan.assignment, now=115.0)
    after = settle(gone)
    assert changes(gone, after) == 3
    assert sorted(holding(after).values()) == [1, 1, 2, 2, 2]


def test_a_live_pod_keeps_what_it_holds_for_the_share_the_held_pod_hands_on_once_back() -> None:
    # 9 partitions, 7 Ready pods, pod-2 keeps 2 and pod-0 holds 2. Back, pod-2's share is 1
    # (pod-0 holding as many sorts first): its second partition is pod-7's. Moving one of
    # pod-0's to pod-7 now would cost a hand-off more if pod-2 never comes back.
    live = [*LIVE, "pod-1", "pod-7"]
    s = in_grace(9, live, {"4": "pod-0", "5": "pod-0", "6": "pod-2", "8": "pod-2"})
    plan = settle(s)
    assert holding(plan) == {"pod-2": 2, "pod-0": 2, **dict.fromkeys(live[1:-1], 1)}
    assert changes(s, plan) == 5
    assert plan.targets == {"pod-0": 2, **dict.fromkeys(live[1:], 1)}
    assert not plan.balanced
    # Back: pod-2 hands its second partition to pod-7, the only move.
    back = dataclasses.replace(
        s, assignment=plan.assignment, members=tuple(member(n) for n in [*live, "pod-2"])
    )
    after = settle(back)
    assert changes(back, after) == 1
    assert holding(after) == {"pod-0": 2, **dict.fromkeys([*live[1:], "pod-2"], 1)}
    # Never back: its 2 partitions move once each (7 owner changes in all, the fewest).
    gone = dataclasses.replace(s, assignment=plan.assignment, now=115.0)
    after = settle(gone)
    assert changes(gone, after) == 2
    assert holding(after)["pod-0"] == 2
    assert sorted(holding(after).values()) == [1, 1, 1, 1, 1, 2, 2]
