"""The safety invariants, checked over the fake API server's record of every write.

What a replica's cache served does not matter here, only what reached the API server:
- no (partition, epoch) is given to two pods (by pod uid: a pod recreated under the same name
  is another pod), and
- a consumer's ``status.epochs`` never goes down for a partition it still lists.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from eventhub_balancer.contracts import configmaps


def epoch_reuse(history: Iterable[tuple[str, dict[str, Any]]]) -> dict[tuple[str, int], set[str]]:
    """Each (partition, epoch) that ConfigMaps gave to more than one pod, with the pods."""
    holders: defaultdict[tuple[str, int], set[str]] = defaultdict(set)
    for kind, body in history:
        if kind != "configmap":
            continue
        parsed = configmaps.parse_data(body.get("data") or {})
        annotations = body["metadata"].get("annotations") or {}
        pod = annotations.get(configmaps.ANNOTATION_POD_UID) or parsed.pod
        for partition, entry in parsed.partitions.items():
            holders[str(partition), entry.epoch].add(pod)
    return {key: pods for key, pods in holders.items() if len(pods) > 1}


def epochs_decreased(history: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    """Each status write that lowered a partition's epoch: 'consumer partition: high -> low'."""
    highest: dict[tuple[str, str], int] = {}
    lowered: list[str] = []
    for kind, body in history:
        if kind != "consumer":
            continue
        name = f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"
        for partition, epoch in ((body.get("status") or {}).get("epochs") or {}).items():
            before = highest.get((name, partition), 0)
            if epoch < before:
                lowered.append(f"{name} {partition}: {before} -> {epoch}")
            highest[name, partition] = max(before, epoch)
    return lowered
