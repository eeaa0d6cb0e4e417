"""What ``ehb bench operator`` is asked and what it reports: its settings, checked with the flag
to change, each round's times, and the figures of a run (medians of the rounds beside each
round, the requests and CPU of the steady window, memory, the first balance, the re-list, the
stages).

The harness that measures them is `operating`; `lagging` checks its fleet with
`check_fleet` too.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from typing import TypedDict

from eventhub_balancer import errors
from eventhub_balancer.contracts import labelselectors, specs
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.benchmarks import clusterviews, stages


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
    #: The pods of other workloads in the namespace (`otherworkloads`), and the bytes of one
    #: as the API server returns it (None without them).
    other_pods: int
    other_pod_bytes: int | None
    #: The bytes of the namespace's pods LIST before the operator started: what a pod watch
    #: without a selector reads when it starts.
    pods_list_bytes: int
    #: ``ehb operator --pod-selector``: the only pods the operator watches (None: every pod).
    pod_selector: str | None
    #: From the operator process's start to every consumer balanced (the ConfigMaps show it).
    first_balance_s: float
    join_balanced_s: float
    planned_leave_balanced_s: float
    deleted_pod_reassigned_s: float
    steady_state_writes_per_cycle: float
    steady_state_requests_per_cycle: float
    #: The LISTs that the periodic relisting makes beside the cycles, per minute (the pods
    #: every 10 s and the managed ConfigMaps every 60 s, per namespace).
    relisting_lists_per_minute: float
    #: The operator's CPU time over the rounds divided by the cycles in them: with a long
    #: interval few cycles run, so it carries more of what runs beside them.
    cycle_cpu_ms: float
    #: The operator's CPU seconds per second while nothing changes (every consumer's cycles,
    #: the relisting, the probes, kopf): what its CPU request is sized from.
    steady_cpu_cores: float
    operator_rss_mb: float
    #: The operator process's most resident memory (VmHWM) from its start to the end of the
    #: rounds, when ``operator_rss_mb`` is read: its start-up is in it.
    operator_peak_rss_mb: float
    #: The same after the forced re-list, which lists every pod watched again: its memory
    #: limit must hold the larger of the two.
    relist_peak_rss_mb: float
    relist_lists_per_consumer: float
    #: Per kind of step (join, planned_leave, deleted_pod), where its time went (`stages`).
    stages: dict[str, stages.Stages]
    #: Each round's steps, in the order run: the figures above are their medians.
    rounds: list[RoundFigures]


def check_fleet(
    *, pods: int, partitions: int, interval_seconds: int, counts: Iterable[tuple[str, int]]
) -> None:
    """`errors.InvalidInput` naming the flag to change, for a bench that deletes a pod each
    round (``ehb bench operator``, ``ehb bench lag``): ``counts`` are (flag, value) pairs that
    must be at least 1, and ``--interval`` is a cycle period the CRD admits."""
    if pods < 2:
        raise errors.InvalidInput("--pods", "must be at least 2 (one is deleted in each round)")
    if partitions <= pods:
        raise errors.InvalidInput("--partitions", "must be more than --pods")
    for flag, value in counts:
        if value < 1:
            raise errors.InvalidInput(flag, "must be at least 1")
    if not 1 <= interval_seconds <= specs.MAX_INTERVAL_SECONDS:
        raise errors.InvalidInput(
            "--interval",
            f"must be from 1 to {specs.MAX_INTERVAL_SECONDS} seconds "
            "(spec.balancing.intervalSeconds)",
        )


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
    #: Pods of other workloads created in the namespace before the operator starts.
    other_pods: int = 0
    #: The operator's ``--pod-selector`` (None: it watches every pod).
    pod_selector: str | None = None

    def __post_init__(self) -> None:
        """`errors.InvalidInput` naming the ``ehb bench operator`` flag to change."""
        if self.other_pods < 0:
            raise errors.InvalidInput("--other-pods", "must be at least 0")
        if self.pod_selector is not None:
            self._check_selector(self.pod_selector)
        check_fleet(
            pods=self.pods,
            partitions=self.partitions,
            interval_seconds=self.interval_seconds,
            counts=(
                ("--rounds", self.rounds),
                ("--consumers", self.consumers),
                ("--steady-cycles", self.steady_cycles),
            ),
        )

    def _check_selector(self, text: str) -> None:
        """The selector parses, and selects every consumer's pods: a pod outside it is no
        member of its consumer, and the run would wait for a balance that never comes."""
        selector = labelselectors.parse_query(text, field="--pod-selector")
        for i in range(self.consumers):
            labels = clusterviews.consumer_pod_labels(consumer_app(i))
            if not selector.matches(labels):
                shown = ",".join(f"{k}={v}" for k, v in labels.items())
                raise errors.InvalidInput(
                    "--pod-selector",
                    f"{text!r} does not select the consumer pods ({shown}): "
                    f"try {clusterviews.CONSUMER_PODS}",
                )


def consumer_app(i: int) -> str:
    """The ``app`` label of the ``i``-th consumer's pods (its selector's)."""
    return f"{clusters.APP}-{i}"


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
    #: The LISTs (pods and ConfigMaps) of the periodic relisting during the steady window,
    #: and its length.
    steady_relistings: int = 0
    steady_seconds: float = 0.0
    #: The operator's CPU time over the steady window.
    steady_cpu_s: float = 0.0
    steady_cycles: int
    cycle_cpu_s: float
    rss_mb: float
    #: The operator's VmHWM at the end of the rounds, and after the forced re-list.
    peak_rss_mb: float
    relist_peak_rss_mb: float
    #: From the operator process's start to every consumer balanced.
    first_balance_s: float
    #: One other pod's bytes (None without them), and the pods LIST's, as the API server
    #: returned them before the operator started.
    other_pod_bytes: int | None
    pods_list_bytes: int
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
            "other_pods": s.other_pods,
            "other_pod_bytes": self.other_pod_bytes,
            "pods_list_bytes": self.pods_list_bytes,
            "pod_selector": s.pod_selector,
            "first_balance_s": round(self.first_balance_s, 3),
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
            "operator_peak_rss_mb": self.peak_rss_mb,
            "relist_peak_rss_mb": self.relist_peak_rss_mb,
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
