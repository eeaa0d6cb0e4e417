"""The operator's Prometheus metrics, in a registry per operator instance.

A registry per instance (not prometheus_client's global one) so that two operators in one
process (tests of peering, the benchmark) keep their figures apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import prometheus_client
import prometheus_client.metrics

import eventhub_balancer
from eventhub_balancer.reconciling import statuses

#: Cycle durations: a cycle is a handful of API round trips, tens of milliseconds normally.
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Hand-off durations: from the revoke to the assignment, bounded by handoffTimeoutSeconds.
HANDOFF_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        # ehb_build_info{version, python} 1: which release each replica runs.
        prometheus_client.Info(
            "ehb_build", "The operator's release and Python version.", registry=self.registry
        ).info(eventhub_balancer.build_labels())
        labels = ["namespace", "consumer"]
        self.partitions = prometheus_client.Gauge(
            "ehb_partitions",
            "Partitions owned per pod (including those being released).",
            [*labels, "pod"],
            registry=self.registry,
        )
        self.partition_count = prometheus_client.Gauge(
            "ehb_partition_count", "Partitions of the Event Hub.", labels, registry=self.registry
        )
        self.members = prometheus_client.Gauge(
            "ehb_members", "Pods that are members.", labels, registry=self.registry
        )
        self.balanced = prometheus_client.Gauge(
            "ehb_balanced",
            "1 when balanced with no hand-off in flight.",
            labels,
            registry=self.registry,
        )
        self.handoffs_in_flight = prometheus_client.Gauge(
            "ehb_handoffs_in_flight",
            "Partitions waiting for a release.",
            labels,
            registry=self.registry,
        )
        self.moves = prometheus_client.Counter(
            "ehb_moves",
            "Moves carried out, by kind and reason.",
            [*labels, "kind", "reason"],
            registry=self.registry,
        )
        self.handoff_duration = prometheus_client.Histogram(
            "ehb_handoff_duration_seconds",
            "From revoke to the new owner's assignment.",
            [*labels, "outcome"],
            buckets=HANDOFF_BUCKETS,
            registry=self.registry,
        )
        self.cycle_duration = prometheus_client.Histogram(
            "ehb_cycle_duration_seconds",
            "Duration of one reconcile cycle.",
            labels,
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.cycles = prometheus_client.Counter(
            "ehb_cycles",
            "Reconcile cycles, by result.",
            [*labels, "result"],
            registry=self.registry,
        )
        self.api_writes = prometheus_client.Counter(
            "ehb_api_writes",
            "Kubernetes API writes, by kind of object.",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.eventhub_reachable = prometheus_client.Gauge(
            "ehb_eventhub_reachable",
            "1 when the last partition read succeeded.",
            labels,
            registry=self.registry,
        )
        self.partitions_troubled = prometheus_client.Gauge(
            "ehb_partitions_troubled",
            "Partitions their pods report failing, parked, stuck or lost, by state.",
            [*labels, "state"],
            registry=self.registry,
        )
        self.recommended_replicas = prometheus_client.Gauge(
            "ehb_recommended_replicas",
            "Consumer pods to run for the backlog, at most the partition count (for autoscalers).",
            labels,
            registry=self.registry,
        )
        self.paused = prometheus_client.Gauge(
            "ehb_paused",
            "1 while spec.paused holds every partition unowned on purpose (alerts skip it).",
            labels,
            registry=self.registry,
        )
        self.ready = prometheus_client.Gauge(
            "ehb_ready",
            "1 while the Ready condition is True; reason: its reason (one series a consumer).",
            [*labels, "reason"],
            registry=self.registry,
        )
        self.checkpoint_store_reachable = prometheus_client.Gauge(
            "ehb_checkpoint_store_reachable",
            "1 while CheckpointStoreReachable is True, 0 while False; reason: its reason (one "
            "series a consumer, none before the store was read).",
            [*labels, "reason"],
            registry=self.registry,
        )
        #: each consumer's Ready and CheckpointStoreReachable reasons as last set: a new
        #: reason replaces its series
        self._ready: dict[tuple[str, str], str] = {}
        self._store: dict[tuple[str, str], str] = {}
        #: each consumer's partitions per pod as last set: a cycle sets only what changed (the
        #: pods of the running consumers: a consumer's go when its daemon stops, `forget`)
        self._pods: dict[tuple[str, str], dict[str, int]] = {}
        #: consumers whose recommendation came from a backlog: kept while none is read (the
        #: running consumers at most)
        self._from_backlog: set[tuple[str, str]] = set()

    def set_partitions(self, *, namespace: str, consumer: str, per_pod: Mapping[str, int]) -> None:
        """Each pod's partition count; only the pods whose count changed, came or went are
        touched (the comparison is of two dicts, not a label lookup per pod)."""
        key = (namespace, consumer)
        last = self._pods.get(key, {})
        for gone in last.keys() - per_pod.keys():
            self.partitions.remove(namespace, consumer, gone)
        for pod, count in per_pod.items() - last.items():
            self.partitions.labels(namespace, consumer, pod).set(count)
        self._pods[key] = dict(per_pod)

    def set_ready(self, *, namespace: str, consumer: str, ready: bool, reason: str) -> None:
        """Ready as the last decision concluded it, under its reason alone."""
        self._one_reason(self.ready, self._ready, namespace, consumer, reason, ready)

    def set_store(self, *, namespace: str, consumer: str, status: str | None, reason: str) -> None:
        """CheckpointStoreReachable as last written, under its reason alone: a foreign
        processor or deleted blobs make it False while Ready stays True. ``status`` Unknown
        (not read yet) or None (not written): no series."""
        reachable = None if status not in ("True", "False") else status == "True"
        self._one_reason(
            self.checkpoint_store_reachable, self._store, namespace, consumer, reason, reachable
        )

    @staticmethod
    def _one_reason(
        gauge: prometheus_client.Gauge,
        reasons: dict[tuple[str, str], str],
        namespace: str,
        consumer: str,
        reason: str,
        value: bool | None,
    ) -> None:
        """One series a consumer for a condition: the last reason's goes when another comes
        (or when ``value`` is None)."""
        key = (namespace, consumer)
        last = reasons.pop(key, None)
        if last is not None and (last != reason or value is None):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, consumer, last)
        if value is not None:
            reasons[key] = reason
            gauge.labels(namespace, consumer, reason).set(1 if value else 0)

    def forget(self, *, namespace: str, consumer: str) -> None:
        """The consumer's daemon stopped: every series labelled with it goes. A deleted
        consumer's troubles must not keep an alert firing, and an operator that saw consumers
        come and go for months must not export (and hold) a series set for each of them."""
        self.set_partitions(namespace=namespace, consumer=consumer, per_pod={})
        self._pods.pop((namespace, consumer), None)
        self._from_backlog.discard((namespace, consumer))
        self._ready.pop((namespace, consumer), None)
        self._store.pop((namespace, consumer), None)
        for metric in self._labelled():
            # The series of a metric by label values; prometheus_client removes one series
            # at a time, so those of the consumer (its first two labels) are found here.
            for values in list(metric._metrics):
                if tuple(values[:2]) == (namespace, consumer):
                    with contextlib.suppress(KeyError):
                        metric.remove(*values)

    def _labelled(self) -> list[prometheus_client.metrics.MetricWrapperBase]:
        """Every metric of the instance (each labelled namespace and consumer first)."""
        return [
            m
            for m in vars(self).values()
            if isinstance(m, prometheus_client.metrics.MetricWrapperBase)
        ]

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)

    def record_cycle(
        self, *, namespace: str, consumer: str, seconds: float, writes: Mapping[str, int]
    ) -> None:
        """One cycle's duration and its API writes by kind of object."""
        self.cycle_duration.labels(namespace, consumer).observe(seconds)
        for kind, count in writes.items():
            if count:
                self.api_writes.labels(namespace, consumer, kind).inc(count)

    def count_write(self, *, namespace: str, consumer: str, kind: str) -> None:
        """One API write made outside a cycle (an Event the poster posts)."""
        self.api_writes.labels(namespace, consumer, kind).inc()

    def record(self, *, namespace: str, consumer: str, values: statuses.Figures) -> None:
        """Set the gauges and count the moves of one cycle."""
        self.set_partitions(namespace=namespace, consumer=consumer, per_pod=values.per_pod)
        self.partition_count.labels(namespace, consumer).set(values.partition_count)
        self.members.labels(namespace, consumer).set(values.members)
        self.balanced.labels(namespace, consumer).set(1 if values.balanced else 0)
        self.handoffs_in_flight.labels(namespace, consumer).set(values.handoffs_in_flight)
        self.eventhub_reachable.labels(namespace, consumer).set(
            1 if values.eventhub_reachable else 0
        )
        self.set_recommended(namespace=namespace, consumer=consumer, values=values)
        self.paused.labels(namespace, consumer).set(1 if values.paused else 0)
        for state, count in values.troubled.items():
            self.partitions_troubled.labels(namespace, consumer, state).set(count)
        for kind, reason in values.moves:
            self.moves.labels(namespace, consumer, kind, reason).inc()
        for outcome, seconds in values.handoffs:
            self.handoff_duration.labels(namespace, consumer, outcome).observe(seconds)

    def set_recommended(self, *, namespace: str, consumer: str, values: statuses.Figures) -> None:
        """The recommended replicas; a cycle that did not read the backlog (with weighting
        "count" most do not) keeps the last one that did, so an autoscaler does not swing."""
        key = (namespace, consumer)
        if values.backlog is None and key in self._from_backlog:
            return
        if values.backlog is not None:
            self._from_backlog.add(key)
        self.recommended_replicas.labels(namespace, consumer).set(values.recommended_replicas)
