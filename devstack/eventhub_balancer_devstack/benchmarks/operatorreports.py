"""What ``ehb bench operator`` is asked and what it reports: its settings, checked with the flag
to change, each round's times, and the figures of a run (medians of the rounds beside each
round, the requests and CPU of the steady window, memory, the re-list, the stages).

The harness that measures them is `operating`; `lagging` checks its fleet with
`check_fleet` too.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from typing import TypedDict

from eventhub_balancer import errors
from eventhub_balancer_devstack.benchmarks import stages


class RoundFigures(TypedDict):
    """One round's three steps, in seconds: the medians hide a slow one, this shows it."""

    join_s: float
    leave_s: float
    deleted_s: float


class Figures(TypedDict):
    consumers: int
    #: The Kubernetes API the run measured: local or real.
    kube: str
    partitions: int
    pods: int
    join_balanced_s: float
    planned_leave_balanced_s: float
    deleted_pod_reassigned_s: float
    steady_state_writes_per_cycle: float
    steady_state_requests_per_cycle: float
    #: The pods LISTs that the periodic relisting makes beside the cycles, per minute.
    relisting_lists_per_minute: float
    #: The operator's CPU time over the rounds divided by the cycles in them: with a long
    #: interval few cycles run, so it carries more of what runs beside them.
    cycle_cpu_ms: float
    #: The operator's CPU seconds per second while nothing changes (every consumer's cycles,
    #: the relisting, the probes, kopf): what its CPU request is sized from.
    steady_cpu_cores: float
    operator_rss_mb: float
    relist_lists_per_consumer: float
    #: Per kind of step (join, planned_leave, deleted_pod), where its time went (`stages`).
    stages: dict[str, stages.Stages]
    #: Each round's steps, in the order run: the figures above are their medians.
    rounds: list[RoundFigures]


def check_fleet(*, pods: int, partitions: int, counts: Iterable[tuple[str, int]]) -> None:
    """`errors.InvalidInput` naming the flag to change, for a bench that deletes a pod each
    round (``ehb bench operator``, ``ehb bench lag``): ``counts`` are (flag, value) pairs that
    must be at least 1."""
    if pods < 2:
        raise errors.InvalidInput("--pods", "must be at least 2 (one is deleted in each round)")
    if partitions <= pods:
        raise errors.InvalidInput("--partitions", "must be more than --pods")
    for flag, value in counts:
        if value < 1:
            raise errors.InvalidInput(flag, "must be at least 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    partitions: int = 32  # per consumer
    pods: int = 4  # per consumer
    consumers: int = 1
    rounds: int = 3
    interval_seconds: int = 2
    steady_cycles: int = 3  # per consumer
    #: The Kubernetes API: the local one, or the real control plane.
    kube: str = "local"

    def __post_init__(self) -> None:
        """`errors.InvalidInput` naming the ``ehb bench operator`` flag to change."""
        check_fleet(
            pods=self.pods,
            partitions=self.partitions,
            counts=(
                ("--rounds", self.rounds),
                ("--consumers", self.consumers),
                ("--interval", self.interval_seconds),
                ("--steady-cycles", self.steady_cycles),
            ),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Round:
    join_s: float
    leave_s: float
    deleted_s: float
    #: Each step's (start, end) on the wall clock, the records' clock.
    windows: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Report:
    settings: Settings
    rounds: tuple[Round, ...]
    steady_writes: int
    steady_requests: int
    #: The pods LISTs of the periodic relisting during the steady window, and its length.
    steady_relistings: int = 0
    steady_seconds: float = 0.0
    #: The operator's CPU time over the steady window.
    steady_cpu_s: float = 0.0
    steady_cycles: int
    cycle_cpu_s: float
    rss_mb: float
    #: the operator's LISTs after one forced re-list of the pod and ConfigMap watches
    relist_lists: int
    #: Per kind of step, each stage's durations over the rounds, in seconds.
    stage_durations: dict[str, dict[str, list[float]]] = dataclasses.field(default_factory=dict)

    def figures(self) -> Figures:
        s = self.settings
        return {
            "kube": s.kube,
            "consumers": s.consumers,
            "partitions": s.partitions,
            "pods": s.pods,
            "join_balanced_s": round(statistics.median(r.join_s for r in self.rounds), 3),
            "planned_leave_balanced_s": round(statistics.median(r.leave_s for r in self.rounds), 3),
            "deleted_pod_reassigned_s": round(
                statistics.median(r.deleted_s for r in self.rounds), 3
            ),
            "steady_state_writes_per_cycle": round(self.steady_writes / self.steady_cycles, 3),
            "steady_state_requests_per_cycle": round(self.steady_requests / self.steady_cycles, 3),
            "relisting_lists_per_minute": round(
                60 * self.steady_relistings / self.steady_seconds, 2
            )
            if self.steady_seconds
            else 0.0,
            "cycle_cpu_ms": round(self.cycle_cpu_s * 1000, 2),
            "steady_cpu_cores": round(self.steady_cpu_s / self.steady_seconds, 3)
            if self.steady_seconds
            else 0.0,
            "operator_rss_mb": self.rss_mb,
            "relist_lists_per_consumer": round(self.relist_lists / self.settings.consumers, 3),
            "stages": {step: stages.figures(found) for step, found in self.stage_durations.items()},
            "rounds": [
                {
                    "join_s": round(r.join_s, 3),
                    "leave_s": round(r.leave_s, 3),
                    "deleted_s": round(r.deleted_s, 3),
                }
                for r in self.rounds
            ],
        }
