"""What the live view shows of each pod of a run: its partitions, lag and rate."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

from eventhub_balancer_devstack.scenarios.models import PodView


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
