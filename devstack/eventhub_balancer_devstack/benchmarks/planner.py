"""How long one planning cycle takes, from small hubs to the largest fleets.

The operator plans on every pod event, so a plan must stay far below the cycle interval even
for 32768 partitions (the largest dedicated Event Hubs cluster) over 4096 pods. Three cases:
fresh (nothing assigned yet: everything is placed), join (balanced over N pods, then one more
joins: the surplus is revoked), leave (balanced over N pods, then one is gone: its partitions
are taken over). Figures are medians of repeated `planning.plan` calls on a prepared scenario,
so parsing and printing are not counted. With ``weighting="lag"`` every partition carries a
random backlog (seeded, so that runs compare), and the balanced starting point is the one the
planner itself reaches.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Literal, TypedDict

from eventhub_balancer.balancing import models, planning, scenarios

Case = Literal["fresh", "join", "leave"]
CASES: tuple[Case, ...] = ("fresh", "join", "leave")

#: (partitions, pods): a small hub, a standard one, a dedicated hub's 1,024 partitions over
#: as many pods (the fleet-scale target: under 20 ms), premium, and a dedicated cluster's
#: maximum.
SIZES: tuple[tuple[int, int], ...] = (
    (32, 4),
    (1024, 64),
    (1024, 1024),
    (4096, 512),
    (32768, 4096),
)


#: The largest random backlog per partition under lag weighting: a spread of four decades, as
#: between idle partitions and one a consumer fell behind on.
MAX_LAG = 10_000


class Figure(TypedDict):
    partitions: int
    pods: int
    case: Case
    ms: float  # median milliseconds per plan


def scenario_for(
    case: Case, *, partitions: int, pods: int, weighting: models.Weighting = "count"
) -> models.Scenario:
    """The scenario a case measures (`pods` is N in the module docstring)."""
    fresh = scenarios.fresh(partition_count=partitions, member_count=pods)
    if weighting == "lag":
        backlog = random.Random(partitions * 7919 + pods)
        fresh = dataclasses.replace(
            fresh,
            lag={p: backlog.randrange(MAX_LAG) for p in fresh.partitions},
            options=dataclasses.replace(fresh.options, weighting="lag"),
        )
    if case == "fresh":
        return fresh
    balanced = dataclasses.replace(fresh, assignment=planning.plan(fresh).assignment)
    if case == "join":
        joiner = models.Member(name=models.MemberName(f"pod-{pods}"), state="ready")
        return dataclasses.replace(balanced, members=(*balanced.members, joiner))
    return dataclasses.replace(balanced, members=balanced.members[1:])


def measure(scenario: models.Scenario, *, repeat: int) -> float:
    """Median milliseconds of `repeat` plans of `scenario`, after one warm-up."""
    planning.plan(scenario)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        planning.plan(scenario)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run(
    *,
    repeat: int,
    sizes: tuple[tuple[int, int], ...] = SIZES,
    cases: tuple[Case, ...] = CASES,
    weighting: models.Weighting = "count",
) -> list[Figure]:
    figures: list[Figure] = []
    for partitions, pods in sizes:
        for case in cases:
            scenario = scenario_for(case, partitions=partitions, pods=pods, weighting=weighting)
            ms = measure(scenario, repeat=repeat)
            figures.append(
                {"partitions": partitions, "pods": pods, "case": case, "ms": round(ms, 3)}
            )
    return figures
