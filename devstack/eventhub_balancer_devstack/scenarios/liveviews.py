"""What the live view shows of a run (`models.Progress`): its step, its figures, its pods.

`runs.ScenarioRun` hands its state to `progress` on every look at the system; each pod's
partitions, lag and rate are `pod_views`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence

from eventhub_balancer_devstack import kubelet, recording
from eventhub_balancer_devstack.scenarios import systems
from eventhub_balancer_devstack.scenarios.models import PodView, Progress, Step, StepResult

#: Events/s per pod are averaged over this window.
RATE_WINDOW_S = 3.0


def progress(
    *,
    label: str,
    steps: tuple[Step, ...],
    step_index: int,
    phase: str,
    elapsed_s: float,
    step_elapsed_s: float,
    snapshot: systems.Snapshot | None,
    recent: Sequence[recording.Batch],
    tally: recording.Tally,
    last_sequence: Mapping[str, int],
    results: Sequence[StepResult],
    final_pods: tuple[PodView, ...] | None,
    local_kubelet: kubelet.LocalKubelet | None,
    ready: Callable[[str], bool],
) -> Progress:
    """The view of a run: ``recent`` batches give the rates, ``last_sequence`` (the hub's last
    sequence number per partition) against ``tally`` the lag; the pods are ``final_pods`` once
    the run has stopped them, else the ``local_kubelet``'s."""
    now = time.time()
    window = [b for b in recent if b.at > now - RATE_WINDOW_S]
    rates: dict[str, float] = {}
    for batch in window:
        rates[batch.pod] = rates.get(batch.pod, 0.0) + batch.size / RATE_WINDOW_S
    held: dict[str, list[str]] = {}
    if snapshot is not None:
        for partition, pod in snapshot.owners.items():
            held.setdefault(pod, []).append(partition)
    lag_of = {p: max(0, last - tally.highest.get(p, -1)) for p, last in last_sequence.items()}
    pods: list[PodView] = list(final_pods or ())
    if local_kubelet is not None and final_pods is None:
        pods = pod_views(
            names=local_kubelet.names(),
            held=held,
            lag_of=lag_of,
            rates=rates,
            ready=ready,
            restarts=local_kubelet.restarts,
        )
    return Progress(
        label=label,
        step_index=step_index,
        steps=steps,
        phase=phase,
        elapsed_s=elapsed_s,
        step_elapsed_s=step_elapsed_s,
        snapshot=snapshot,
        pods=tuple(pods),
        # The hub's counts are read once a second, the records on every poll: what was
        # processed was produced, so the larger figure is the closer one.
        produced=max(sum(n + 1 for n in last_sequence.values()), tally.processed),
        processed=tally.processed,
        duplicates=tally.duplicates,
        lag=sum(lag_of.values()),
        events_per_s=round(sum(rates.values()), 1),
        results=tuple(results),
    )


def pod_views(
    *,
    names: Sequence[str],
    held: Mapping[str, list[str]],
    lag_of: Mapping[str, int],
    rates: Mapping[str, float],
    ready: Callable[[str], bool],
    restarts: Callable[[str], int],
) -> list[PodView]:
    """One view per pod in ``names``: the partitions it ``held``, their lag (``lag_of``), its
    events per second (``rates``), whether it is ``ready`` and how often it ``restarts`` (0
    for a pod the kubelet no longer knows)."""
    pods = []
    for name in names:
        mine = tuple(sorted(held.get(name, []), key=_partition_key))
        count = 0
        with contextlib.suppress(KeyError):
            count = restarts(name)
        pods.append(
            PodView(
                name=name,
                ready=ready(name),
                restarts=count,
                partitions=mine,
                lag=sum(lag_of.get(p, 0) for p in mine),
                events_per_s=round(rates.get(name, 0.0), 1),
            )
        )
    return pods


def _partition_key(partition: str) -> tuple[int, str]:
    return (int(partition), partition) if partition.isdigit() else (1 << 30, partition)
