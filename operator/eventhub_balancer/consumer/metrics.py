"""The consumer's Prometheus metrics, read from the runtime's state when scraped.

Counters live in :class:`PartitionStats`, one per partition for the life of the process (a
partition that moves away and back keeps counting, as Prometheus counters must); a pod exports
them while it holds the partition and `RELEASED_SERIES_SECONDS` after, so that a pod does not
come to export a series set for every partition it ever held. Gauges (checkpoint age, lag,
owned partitions) are computed at scrape time from the runtime's state, so they are never
stale. Each runtime has its own registry: several runtimes in one
process (tests) do not collide.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

import eventhub_balancer
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.contracts import partitionreports

PREFIX: Final = "ehb_consumer_"
#: How long a partition's counters are still exported after the pod let it go: scrapes
#: enough to count its last events, then its series go (a partition that comes back brings
#: them back, counting on).
RELEASED_SERIES_SECONDS: Final = 600.0


@dataclasses.dataclass
class PartitionStats:
    """What happened on one partition since the process started (mutable, single-threaded)."""

    events: int = 0
    batches: int = 0
    handler_errors: int = 0
    checkpoints: int = 0
    #: The last processed event's sequence number, and the last checkpointed one.
    processed_sequence_number: int | None = None
    checkpointed_sequence_number: int | None = None
    #: Wall-clock time of the last successful checkpoint write (or fence).
    checkpoint_time: float | None = None
    last_enqueued: deliveries.LastEnqueued | None = None
    #: Batches (and their events) written to the dead-letter store by the failure policy.
    dead_lettered_batches: int = 0
    dead_lettered_events: int = 0
    #: The batches set aside at the epoch of the last one, with its name and error: what the
    #: partition's report tells the operator (`attempts.BatchAttempts.report`).
    set_aside: partitionreports.SetAside | None = None
    owned: bool = False
    stuck: bool = False
    #: Stopped by the ``park`` policy (until released).
    parked: bool = False
    #: A batch has failed and is being retried (or dead-lettered).
    failing: bool = False

    def lag(self) -> int | None:
        """Events enqueued but not processed, from the last-enqueued runtime metrics."""
        if self.last_enqueued is None:
            return None
        done = self.processed_sequence_number
        if done is None:
            done = self.checkpointed_sequence_number
        if done is None:
            return None
        return max(0, self.last_enqueued.sequence_number - done)


class RuntimeCollector(Collector):
    """Turns the runtime's per-partition stats into metric families at each scrape."""

    def __init__(
        self,
        stats: Callable[[], Mapping[str, PartitionStats]],
        *,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._stats = stats
        self._now = now
        #: when each partition was last seen held (or first seen let go) at a scrape
        self._held_at: dict[str, float] = {}

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        now = self._now()
        events = CounterMetricFamily(
            PREFIX + "events", "Events handed to the handler and done.", labels=["partition"]
        )
        batches = CounterMetricFamily(
            PREFIX + "batches", "Micro-batches the handler completed.", labels=["partition"]
        )
        errors_ = CounterMetricFamily(
            PREFIX + "handler_errors",
            "Handler calls that raised (the batch is retried).",
            labels=["partition"],
        )
        checkpoints = CounterMetricFamily(
            PREFIX + "checkpoints", "Checkpoint writes.", labels=["partition"]
        )
        age = GaugeMetricFamily(
            PREFIX + "checkpoint_age_seconds",
            "Seconds since the partition's last checkpoint write.",
            labels=["partition"],
        )
        lag = GaugeMetricFamily(
            PREFIX + "lag_events",
            "Events enqueued but not yet processed (from last-enqueued properties).",
            labels=["partition"],
        )
        stuck = GaugeMetricFamily(
            PREFIX + "partition_stuck",
            "1 while a partition's batch has failed or run longer than the stuck limit.",
            labels=["partition"],
        )
        dead_lettered = CounterMetricFamily(
            PREFIX + "dead_lettered_events",
            "Events written to the dead-letter store after the handler failed maxAttempts times.",
            labels=["partition"],
        )
        failing = GaugeMetricFamily(
            PREFIX + "partition_failing",
            "1 while a partition's batch has failed and is being retried.",
            labels=["partition"],
        )
        parked = GaugeMetricFamily(
            PREFIX + "partition_parked",
            "1 while a partition is parked at its checkpoint by the failure policy.",
            labels=["partition"],
        )
        owned = GaugeMetricFamily(PREFIX + "owned_partitions", "Partitions this pod processes now.")
        owned_count = 0
        for partition in sorted(stats, key=lambda p: (len(p), p)):
            s = stats[partition]
            if s.owned:
                self._held_at[partition] = now
            elif now - self._held_at.setdefault(partition, now) > RELEASED_SERIES_SECONDS:
                continue
            events.add_metric([partition], s.events)
            batches.add_metric([partition], s.batches)
            errors_.add_metric([partition], s.handler_errors)
            checkpoints.add_metric([partition], s.checkpoints)
            dead_lettered.add_metric([partition], s.dead_lettered_events)
            if not s.owned:
                continue
            owned_count += 1
            stuck.add_metric([partition], 1.0 if s.stuck else 0.0)
            failing.add_metric([partition], 1.0 if s.failing else 0.0)
            parked.add_metric([partition], 1.0 if s.parked else 0.0)
            if s.checkpoint_time is not None:
                age.add_metric([partition], max(0.0, now - s.checkpoint_time))
            value = s.lag()
            if value is not None:
                lag.add_metric([partition], value)
        owned.add_metric([], owned_count)
        yield from (
            events,
            batches,
            errors_,
            checkpoints,
            dead_lettered,
            age,
            lag,
            stuck,
            failing,
            parked,
            owned,
        )


@dataclasses.dataclass
class TriggerStats:
    """Spark mode's triggers since the process started (``triggers.SparkTriggers`` counts)."""

    succeeded: int = 0
    failed: int = 0
    #: Events in the triggers that returned.
    events: int = 0
    #: Seconds spent in triggers (their handler calls, DataFrame included), and the last's.
    seconds: float = 0.0
    last_seconds: float | None = None


class TriggerCollector(Collector):
    """Spark mode's trigger counters, from `TriggerStats` at each scrape."""

    def __init__(self, stats: TriggerStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        triggers = CounterMetricFamily(
            PREFIX + "spark_triggers",
            "Spark triggers (one handler call over the pod's partitions), by outcome.",
            labels=["outcome"],
        )
        triggers.add_metric(["ok"], s.succeeded)
        triggers.add_metric(["failed"], s.failed)
        events = CounterMetricFamily(
            PREFIX + "spark_trigger_events", "Events in the Spark triggers that returned."
        )
        events.add_metric([], s.events)
        seconds = CounterMetricFamily(
            PREFIX + "spark_trigger_seconds", "Seconds spent in Spark triggers, failed ones too."
        )
        seconds.add_metric([], s.seconds)
        yield from (triggers, events, seconds)
        if s.last_seconds is not None:
            last = GaugeMetricFamily(
                PREFIX + "spark_last_trigger_seconds", "How long the last Spark trigger took."
            )
            last.add_metric([], s.last_seconds)
            yield last


class RefusalCollector(Collector):
    """ConfigMaps the pod refused as not its own (forged, another pod's, unmanaged), by
    reason: a count above zero means someone writes ConfigMaps that mimic the operator's."""

    def __init__(self, refused: Callable[[], Mapping[str, int]]) -> None:
        self._refused = refused

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            PREFIX + "assignment_refusals",
            "ConfigMaps matching this pod's labels that were not applied, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(self._refused().items()):
            family.add_metric([reason], count)
        yield family


class BuildCollector(Collector):
    """``ehb_consumer_build_info{version, python} 1``: which release the pod runs."""

    def collect(self) -> Iterator[Metric]:
        labels = eventhub_balancer.build_labels()
        family = GaugeMetricFamily(
            PREFIX + "build_info",
            "The consumer runtime's release and Python version.",
            labels=sorted(labels),
        )
        family.add_metric([labels[k] for k in sorted(labels)], 1.0)
        yield family


def registry_for(
    stats: Callable[[], Mapping[str, PartitionStats]],
    *,
    triggers: TriggerStats | None = None,
    refusals: Callable[[], Mapping[str, int]] | None = None,
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BuildCollector())
    registry.register(RuntimeCollector(stats))
    if triggers is not None:
        registry.register(TriggerCollector(triggers))
    if refusals is not None:
        registry.register(RefusalCollector(refusals))
    return registry
