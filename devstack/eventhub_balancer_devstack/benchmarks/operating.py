"""How fast the operator moves partitions, and what a steady state costs, on the local stack.

The claims the project makes against the SDKs' own balancing (docs/index.md, "Why")
are about time and API load: a pod that joins is balanced within one cycle plus the
hand-off, a deleted pod's partitions are reassigned within 2 s, a steady state writes
nothing. This module measures them with everything real except the pods: the local
Kubernetes API, the Event Hubs emulator, and the operator itself (kopf, adapters, handlers)
in a background thread, on the harness the integration tests use as well (`clusters`:
pods are Pod objects whose status the harness sets, and a consumer double acknowledges
releases as the consumer runtime does).

Times are taken from the moment the API server holds the change (the call returned) to the
moment the ConfigMaps, which is what the pods act on, show the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

from eventhub_balancer.balancing import models
from eventhub_balancer.handlers import running
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from eventhub_balancer_devstack.kube import LocalKubeAPI

#: The bench's namespace, EventHubConsumer (and hub) and pods' ``app`` label.
NAMESPACE = "bench"
CONSUMER = clusters.CONSUMER
APP = clusters.APP
#: How often the consumer double looks for revoked partitions; the real runtime watches.
ACK_POLL_SECONDS = 0.02


class Figures(TypedDict):
    join_balanced_s: float
    planned_leave_balanced_s: float
    deleted_pod_reassigned_s: float
    steady_state_writes_per_cycle: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    partitions: int = 32
    pods: int = 4
    rounds: int = 3
    interval_seconds: int = 2
    steady_cycles: int = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class Round:
    join_s: float
    leave_s: float
    deleted_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Report:
    settings: Settings
    rounds: tuple[Round, ...]
    steady_writes: int
    steady_cycles: int

    def figures(self) -> Figures:
        return {
            "join_balanced_s": round(statistics.median(r.join_s for r in self.rounds), 3),
            "planned_leave_balanced_s": round(statistics.median(r.leave_s for r in self.rounds), 3),
            "deleted_pod_reassigned_s": round(
                statistics.median(r.deleted_s for r in self.rounds), 3
            ),
            "steady_state_writes_per_cycle": round(self.steady_writes / self.steady_cycles, 3),
        }


@contextlib.contextmanager
def local_stack(partitions: int) -> Iterator[tuple[LocalKubeAPI, EventHubsEmulator, Path]]:
    """A local API server and an emulator with hub ``orders``; stopped on exit."""
    kube = LocalKubeAPI().start()
    emulator = EventHubsEmulator(hubs={CONSUMER: partitions})
    try:
        emulator.start_in_thread()
        with tempfile.TemporaryDirectory(prefix="ehb-bench-") as tmp:
            yield kube, emulator, kube.write_kubeconfig(Path(tmp) / "kubeconfig")
    finally:
        emulator.stop_in_thread()
        kube.stop()


def _steady_writes(operator: running.OperatorThread, cycles: int, interval: float) -> int:
    """API writes over ``cycles`` cycles in which nothing changes."""
    runtime = operator.runtime
    writes = sum(runtime.kube.writes.values())
    start = runtime.cycles_run
    clusters.wait_for(
        lambda: runtime.cycles_run >= start + cycles,
        timeout=cycles * interval + clusters.WAIT_SECONDS,
        what=f"{cycles} steady cycles",
    )
    return sum(runtime.kube.writes.values()) - writes


def run(settings: Settings) -> Report:
    if settings.pods < 2 or settings.partitions < settings.pods + 1:
        raise ValueError("need at least 2 pods and more partitions than pods + 1")
    ns, p = NAMESPACE, settings.partitions
    with local_stack(p) as (kube, emulator, kubeconfig):
        cluster = clusters.LocalCluster(kube)
        cluster.secret(ns, name="eh", key="cs", value=emulator.connection_string())
        cluster.consumer(
            ns,
            CONSUMER,
            hub=CONSUMER,
            app=APP,
            secret="eh",
            balancing={
                "intervalSeconds": settings.interval_seconds,
                "podGraceSeconds": 20,
                "handoffTimeoutSeconds": 30,
            },
        )
        members = {f"c-{i}" for i in range(settings.pods)}
        for pod in sorted(members, key=models.name_key):
            cluster.pod(ns, pod, app=APP)
        operator = clusters.start_operator(kubeconfig, namespaces=(ns,))
        try:
            with clusters.ConsumerDouble(kube, ns, poll_seconds=ACK_POLL_SECONDS):
                clusters.wait_for(
                    lambda: cluster.balanced_over(ns, members, p), what="initial balance"
                )
                # Let the last status write of the initial cycles land before counting.
                _steady_writes(operator, 1, settings.interval_seconds)
                steady = _steady_writes(operator, settings.steady_cycles, settings.interval_seconds)
                rounds = []
                serial = settings.pods
                for _ in range(settings.rounds):
                    figures, members = _round(cluster, ns, members, p, serial)
                    rounds.append(figures)
                    serial += 2
        finally:
            operator.stop()
    return Report(
        settings=settings,
        rounds=tuple(rounds),
        steady_writes=steady,
        steady_cycles=settings.steady_cycles,
    )


def _round(
    cluster: clusters.LocalCluster, ns: str, members: set[str], p: int, serial: int
) -> tuple[Round, set[str]]:
    """Join one pod, let it leave gracefully, delete another outright, refill: the members
    after the round are as many as before."""
    joiner = f"c-{serial}"
    cluster.pod(ns, joiner, app=APP)
    started = time.monotonic()
    grown = members | {joiner}
    clusters.wait_for(lambda: cluster.balanced_over(ns, grown, p), what=f"{joiner} joined")
    join_s = time.monotonic() - started

    cluster.terminate(ns, joiner)
    started = time.monotonic()
    clusters.wait_for(lambda: cluster.balanced_over(ns, members, p), what=f"{joiner} drained")
    leave_s = time.monotonic() - started
    cluster.delete_pod(ns, joiner)
    clusters.wait_for(lambda: joiner not in cluster.maps(ns), what=f"{joiner}'s ConfigMap deleted")

    victim = min(members, key=models.name_key)
    cluster.delete_pod(ns, victim)
    started = time.monotonic()
    rest = members - {victim}
    clusters.wait_for(
        lambda: sum(cluster.counts(ns).get(m, 0) for m in rest) == p,
        what=f"{victim}'s partitions reassigned",
    )
    deleted_s = time.monotonic() - started

    refill = f"c-{serial + 1}"
    cluster.pod(ns, refill, app=APP)
    after = rest | {refill}
    clusters.wait_for(lambda: cluster.balanced_over(ns, after, p), what=f"{refill} joined")
    return Round(join_s=join_s, leave_s=leave_s, deleted_s=deleted_s), after
