"""The operator under churn for minutes: does what it holds stay flat?

An operator runs for months while Deployments roll: every pod it sees has a name and a uid
that never come back, ConfigMaps are written, deleted and tampered with, EventHubConsumers
come and go. Anything it keeps per pod, per ConfigMap or per consumer and never lets go of
grows until its memory limit. ``ehb bench operator`` runs a few rounds and cannot tell.

This soak runs the operator as ``ehb bench operator`` does (the local Kubernetes API, the Event
Hubs emulator and Azurite, the operator and the consumer doubles as processes of their own,
`processes`) on one EventHubConsumer of ``partitions`` x ``pods`` and churns its fleet round
after round for ``seconds`` (`churnedworlds`): a pod with a new name joins; the oldest
leaves, drained (a graceful delete) in one round and deleted outright in the next; every few
rounds a pod's ConfigMap is deleted under it or overwritten, and the operator writes it
again, and an EventHubConsumer with pods of its own is created, balanced and deleted. Every
few seconds it samples the operator's process (`processsamples.usage`): resident memory, threads,
open descriptors. Growth is the least-squares slope over the second half
(`processsamples.second_half_slopes`), as for the consumer soak.

With ``tracemalloc`` the operator traces its allocations (`tracedoperators`) from the initial
balance on, and dumps a snapshot at a fifth of the run and at its end; the report lists what
grew most between the two, by traceback. Tracing slows the operator and adds to its memory:
its slopes are not the figures, only where to look.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NotRequired, TypedDict

from eventhub_balancer import errors
from eventhub_balancer_devstack.benchmarks import (
    benchstacks,
    churnedworlds,
    processes,
    processsamples,
    soaking,
    tracedoperators,
    watching,
)

logger = logging.getLogger(__name__)

#: The project's target (docs/benchmarks.md): MB of resident memory per minute, second half.
TARGET_RSS_MB_PER_MIN = soaking.TARGET_RSS_MB_PER_MIN
#: The early snapshot, as a fraction of the run (the issue's "minute 2 of 10").
EARLY_SNAPSHOT = 0.2


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    seconds: float = 600.0
    partitions: int = 32
    pods: int = 8
    #: Seconds between two samples of the operator's process.
    sample_seconds: float = 5.0
    tracemalloc: bool = False

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.sample_seconds <= 0:
            raise errors.InvalidInput("soak", "--seconds and the sampling must be > 0")
        if self.pods < 2:
            raise errors.InvalidInput("--pods", "must be at least 2 (the oldest leaves)")
        if self.partitions <= self.pods:
            raise errors.InvalidInput("--partitions", "must be more than --pods")


class Report(TypedDict):
    mode: str
    seconds: float
    partitions: int
    pods: int
    interval_seconds: int
    sample_seconds: float
    churned: churnedworlds.Churned
    rss_mb_start: float
    rss_mb_mid: float
    rss_mb_end: float
    slopes: processsamples.Slopes
    target_rss_mb_per_min: float
    #: The slope within the target, and flat threads and descriptors; None: a run shorter
    #: than `soaking.JUDGED_SECONDS`, not judged (``not_judged`` says why).
    ok: bool | None
    not_judged: NotRequired[str]
    #: With tracemalloc: its slopes are not the figures (the tracing costs memory).
    traced: bool
    growths: list[tracedoperators.Growth]
    samples: processsamples.Series


# -- the stack and the world around the operator


@contextlib.contextmanager
def _stack(settings: Settings) -> Iterator[tuple[Path, str, str, processes.Child]]:
    """The API server, the emulator (the churned consumer's hub and the passing consumers'
    hub) and Azurite (`benchstacks`): the kubeconfig and the two connection strings."""
    hubs = [
        f"{churnedworlds.CONSUMER}={settings.partitions}",
        f"{churnedworlds.PASSING_HUB}={churnedworlds.PASSING_PARTITIONS}",
    ]
    with benchstacks.started(hubs=hubs, kube="local") as stack:
        yield stack


class Sampler:
    """Samples a process every ``every`` seconds in a thread of its own, from ``start``."""

    def __init__(self, pid: int, *, every: float) -> None:
        self.pid = pid
        self.every = every
        self.series: processsamples.Series = {
            "t_s": [],
            "rss_mb": [],
            "threads": [],
            "descriptors": [],
            "processes": [],
        }
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self.began = 0.0

    def start(self) -> None:
        self.began = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """One last sample, then the thread ends."""
        self._stopped.set()
        self._thread.join(timeout=10 * self.every)
        self._sample()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._sample()
            self._stopped.wait(self.every)

    def _sample(self) -> None:
        held = processsamples.usage(processsamples.process_tree(self.pid))
        series, t = self.series, time.monotonic() - self.began
        series["t_s"].append(round(t, 1))
        series["rss_mb"].append(round(held.rss_bytes / 2**20, 2))
        series["threads"].append(held.threads)
        series["descriptors"].append(held.descriptors)
        series["processes"].append(held.processes)
        logger.info(
            "%5.0f s: %.1f MB, %d threads, %d descriptors",
            t,
            held.rss_bytes / 2**20,
            held.threads,
            held.descriptors,
        )


# -- the run


def run(settings: Settings) -> Report:
    # As the consumer soak: a SIGTERM (from `timeout`) unwinds like ^C, stopping every child.
    previous = signal.signal(signal.SIGTERM, soaking._interrupt)
    try:
        return _run(settings)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(settings: Settings) -> Report:
    found: list[tracedoperators.Growth] = []
    with (
        tempfile.TemporaryDirectory(prefix="ehb-soak-snapshots-") as snapshots,
        _stack(settings) as (kubeconfig, hubs, store, _server),
    ):
        api = watching.client(kubeconfig)
        world = churnedworlds.World(api, partitions=settings.partitions)
        stopped = threading.Event()
        watcher = threading.Thread(
            target=watching.watch_configmaps,
            args=(api, churnedworlds.NAMESPACE, stopped, world.view.on_body),
            daemon=True,
        )
        watcher.start()
        world.cluster.credentials(hubs=hubs, store=store)
        doubles = processes.Child(
            "doubles", "--kubeconfig", str(kubeconfig), "--namespace", churnedworlds.NAMESPACE
        )
        operator: tracedoperators.OperatorChild | None = None
        try:
            operator = tracedoperators.OperatorChild(
                kubeconfig,
                churnedworlds.NAMESPACE,
                snapshots=Path(snapshots) if settings.tracemalloc else None,
            )
            world.start(settings.pods)
            if settings.tracemalloc:
                operator.trace()
            sampler = Sampler(operator.process.pid, every=settings.sample_seconds)
            sampler.start()
            early: Path | None = None
            end = sampler.began + settings.seconds
            while time.monotonic() < end:
                world.round()
                if (
                    settings.tracemalloc
                    and early is None
                    and time.monotonic() >= sampler.began + EARLY_SNAPSHOT * settings.seconds
                ):
                    early = operator.snapshot()
            sampler.stop()
            if early is not None:
                found = tracedoperators.growths(early, operator.snapshot())
        finally:
            if operator is not None:
                operator.stop()
            doubles.stop()
            stopped.set()
    return _report(settings, sampler.series, churned=world.churned, growths=found)


def _report(
    settings: Settings,
    series: processsamples.Series,
    *,
    churned: churnedworlds.Churned,
    growths: list[tracedoperators.Growth],
) -> Report:
    seconds = series["t_s"][-1]
    slopes = processsamples.second_half_slopes(series, seconds=seconds)
    half = next(i for i, t in enumerate(series["t_s"]) if t >= seconds / 2)
    growth = soaking.growth_met(
        slopes, target=TARGET_RSS_MB_PER_MIN, seconds=seconds, run=settings.seconds
    )
    report: Report = {
        "mode": "operator",
        "seconds": round(seconds, 1),
        "partitions": settings.partitions,
        "pods": settings.pods,
        "interval_seconds": churnedworlds.INTERVAL_SECONDS,
        "sample_seconds": settings.sample_seconds,
        "churned": churned,
        "rss_mb_start": series["rss_mb"][0],
        "rss_mb_mid": series["rss_mb"][half],
        "rss_mb_end": series["rss_mb"][-1],
        "slopes": slopes,
        "target_rss_mb_per_min": TARGET_RSS_MB_PER_MIN,
        "ok": growth,
        "traced": settings.tracemalloc,
        "growths": growths,
        "samples": series,
    }
    if growth is None:
        report["not_judged"] = soaking.NOT_JUDGED
    return report
