"""From a plan to the writes that carry it out: only what differs, in a safe order, pure.

An unchanged assignment gives no write at all (a steady state costs no API call). A
ConfigMap whose data differs from what the plan gives its pod is written back, whoever changed
it. The ConfigMaps that gain a partition (or a higher epoch) come first, so that a pod never
sees its partition taken before its successor was told; `handlers.writing` keeps that order.
The pod annotations are informational and optional (``annotate_pods``): without them the
operator needs no ``patch`` on pods.

Each pod's data is built once for the inputs that determine it (`memos`): a pod whose
partitions, generation and spec are those of the last cycle costs a lookup and a comparison
of small values, not a JSON dump, so a cycle's work grows with what changed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, podstates, specs
from eventhub_balancer.reconciling import memos, observations

#: The ownerReference's kind: Kubernetes collects a pod's ConfigMap with the pod.
POD_KIND = {"apiVersion": "v1", "kind": "Pod"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapWrite:
    """Create or patch one pod's ConfigMap."""

    name: str
    pod: str
    pod_uid: str
    create: bool
    body: Mapping[str, Any]  # the full object to create, or the merge patch
    resource_version: str | None
    gains: bool  # it receives a partition or a higher epoch: written before the others lose


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapDelete:
    name: str
    uid: str
    pod: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodAnnotation:
    pod: str
    annotations: Mapping[str, str | None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Writes:
    """The ConfigMap and pod writes of one cycle, in the order `handlers.writing` applies."""

    maps: tuple[MapWrite, ...] = ()  # gaining ConfigMaps first
    deletes: tuple[MapDelete, ...] = ()
    pods: tuple[PodAnnotation, ...] = ()

    @property
    def count(self) -> int:
        return len(self.maps) + len(self.deletes) + len(self.pods)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Built:
    """A pod's ConfigMap data (`configmaps.build_data`) and the inputs it was built from."""

    spec: specs.ConsumerSpec
    consumer: str
    generation: int
    partitions: Mapping[models.PartitionId, configmaps.PartitionEntry]
    data: Mapping[str, str]


#: Each pod's data as built in its consumer's last cycle: an unchanged pod is not built again.
BUILT: memos.Memo[str, Built] = memos.Memo()
#: The spec of each consumer's last cycle: an equal spec is replaced by it, so that every
#: pod's entry is checked by identity rather than by comparing specs field by field.
SPECS: memos.Memo[str, specs.ConsumerSpec] = memos.Memo()
#: Names are sorted and hashed for every pod in every cycle; both depend on the name alone.
#: Sized for a fleet of 1,024 pods with their ConfigMaps, and the churn of a few cycles.
NAMES_KEPT = 8192
_name_key = functools.lru_cache(maxsize=NAMES_KEPT)(models.name_key)
_configmap_name = functools.lru_cache(maxsize=NAMES_KEPT)(configmaps.configmap_name)


def _data(
    memo: memos.Round[str, Built],
    generation: int,
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    pod: str,
    partitions: Mapping[models.PartitionId, configmaps.PartitionEntry],
) -> Mapping[str, str]:
    """`configmaps.build_data` through the memo: an unchanged pod's data is built once."""
    kept = memo.get(
        pod,
        fits=lambda b: (
            b.spec is spec
            and b.generation == generation
            and b.consumer == consumer
            and b.partitions == partitions
        ),
        compute=lambda: Built(
            spec=spec,
            consumer=consumer,
            generation=generation,
            partitions=partitions,
            data=configmaps.build_data(
                spec=spec, consumer=consumer, pod=pod, generation=generation, partitions=partitions
            ),
        ),
    )
    return kept.data


def by_owner(
    assignment: Mapping[models.PartitionId, models.Ownership],
) -> dict[str, dict[models.PartitionId, configmaps.PartitionEntry]]:
    """Each owner's partitions, in one pass (a cycle's cost stays linear in the fleet)."""
    grouped: dict[str, dict[models.PartitionId, configmaps.PartitionEntry]] = {}
    for pid, o in assignment.items():
        if o.owner is not None:
            grouped.setdefault(o.owner, {})[pid] = _entry(o.epoch, o.state, o.since)
    return grouped


@functools.lru_cache(maxsize=NAMES_KEPT)
def _entry(epoch: int, state: models.OwnershipState, since: float) -> configmaps.PartitionEntry:
    # The same entry object cycle after cycle: a pod's partitions compare by identity first.
    return configmaps.PartitionEntry(epoch=epoch, state=state, since=podstates.from_seconds(since))


def _owner_reference(pod: podstates.PodState) -> dict[str, Any]:
    # Kubernetes collects the ConfigMap with the pod; no blockOwnerDeletion (no finalizer RBAC).
    return {**POD_KIND, "name": pod.name, "uid": pod.uid, "controller": False}


def derive_writes(
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    assignment: Mapping[models.PartitionId, models.Ownership],
    maps: Sequence[observations.StoredMap],
    pods: Mapping[str, podstates.PodState],
    pod_annotations: Mapping[str, Mapping[str, str]],
    problems: Mapping[str, tuple[str, ...]] = {},
    annotate_pods: bool = True,
) -> Writes:
    """Only what differs: an unchanged assignment gives no writes at all."""
    scope = (namespace, consumer)
    with BUILT.round(scope) as built, SPECS.round(scope) as last_spec:
        return _derive_writes(
            spec=last_spec.get(consumer, fits=spec.__eq__, compute=lambda: spec),
            consumer=consumer,
            namespace=namespace,
            assignment=assignment,
            maps=maps,
            pods=pods,
            pod_annotations=pod_annotations,
            problems=problems,
            annotate_pods=annotate_pods,
            built=built,
        )


def _derive_writes(
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    assignment: Mapping[models.PartitionId, models.Ownership],
    maps: Sequence[observations.StoredMap],
    pods: Mapping[str, podstates.PodState],
    pod_annotations: Mapping[str, Mapping[str, str]],
    problems: Mapping[str, tuple[str, ...]],
    annotate_pods: bool,
    built: memos.Round[str, Built],
) -> Writes:
    by_name = {cm.name: cm for cm in maps}
    ordered_maps = sorted(maps, key=lambda m: _name_key(m.name))
    # A pod's ConfigMap is found by the pod it is for (its data, else its label), so that one
    # written under an older naming scheme is updated in place rather than duplicated.
    by_pod: dict[str, observations.StoredMap] = {}
    for stored in ordered_maps:
        by_pod.setdefault(stored.pod, stored)
    writes: list[MapWrite] = []
    deletes: list[MapDelete] = []
    annotate: list[PodAnnotation] = []
    wanted: set[str] = set()
    owners = by_owner(assignment)
    for pod in sorted(pods.values(), key=lambda p: _name_key(p.name)):
        if pod.state is None:
            continue
        partitions = owners.get(pod.name, {})
        cm = by_name.get(_configmap_name(consumer=consumer, pod=pod.name))
        if cm is None:
            cm = by_pod.get(pod.name)
        name = cm.name if cm is not None else _configmap_name(consumer=consumer, pod=pod.name)
        if cm is None and not partitions and pod.state == "terminating":
            continue
        wanted.add(name)
        same_pod = (
            cm is not None and (not cm.pod_uid or cm.pod_uid == pod.uid) and cm.pod == pod.name
        )
        current = cm.data if (cm is not None and same_pod) else None
        if cm is not None and not same_pod:
            # Keep counting generations up: the pod may compare them across incarnations.
            current = {configmaps.KEY_GENERATION: str(cm.parsed.generation)}
        data = configmaps.desired_data(
            spec=spec,
            consumer=consumer,
            pod=pod.name,
            partitions=partitions,
            current=current,
            build=functools.partial(
                _data, built, spec=spec, consumer=consumer, pod=pod.name, partitions=partitions
            ),
        )
        before = {
            pid: e.epoch for pid, e in (cm.parsed.partitions.items() if cm is not None else ())
        }
        gains = any(before.get(pid, -1) < e.epoch for pid, e in partitions.items())
        if cm is None:
            assert data is not None
            writes.append(
                MapWrite(
                    name=name,
                    pod=pod.name,
                    pod_uid=pod.uid,
                    create=True,
                    resource_version=None,
                    gains=gains,
                    body={
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": name,
                            "namespace": namespace,
                            "labels": configmaps.labels(consumer=consumer, pod=pod.name),
                            "annotations": {configmaps.ANNOTATION_POD_UID: pod.uid},
                            "ownerReferences": [_owner_reference(pod)],
                        },
                        "data": data,
                    },
                )
            )
        elif data is not None or not same_pod or cm.name in problems:
            if data is None:  # parsed cleanly but flagged (e.g. a claim it lost): rewrite
                data = configmaps.build_data(
                    spec=spec,
                    consumer=consumer,
                    pod=pod.name,
                    generation=cm.parsed.generation + 1,
                    partitions=partitions,
                )
            patch: dict[str, Any] = {
                "data": {**{k: None for k in cm.data if k not in data}, **data}
            }
            if not same_pod:
                patch["metadata"] = {
                    "annotations": {
                        configmaps.ANNOTATION_POD_UID: pod.uid,
                        configmaps.ANNOTATION_RELEASED: None,
                        configmaps.ANNOTATION_APPLIED_GENERATION: None,
                    },
                    "labels": configmaps.labels(consumer=consumer, pod=pod.name),
                    "ownerReferences": [_owner_reference(pod)],
                }
            writes.append(
                MapWrite(
                    name=name,
                    pod=pod.name,
                    pod_uid=pod.uid,
                    create=False,
                    resource_version=cm.resource_version or None,
                    gains=gains,
                    body=patch,
                )
            )
        if annotate_pods and pod.state != "terminating":
            desired = configmaps.pod_annotations(consumer=consumer, partitions=partitions)
            current_annotations = pod_annotations.get(pod.name, {})
            has_ours = configmaps.POD_ANNOTATION_PARTITIONS in current_annotations
            differs = any(current_annotations.get(k) != v for k, v in desired.items())
            if differs and (partitions or has_ours):
                annotate.append(PodAnnotation(pod=pod.name, annotations=desired))
    for cm in ordered_maps:
        if cm.name not in wanted:
            deletes.append(MapDelete(name=cm.name, uid=cm.uid, pod=cm.pod))
    # Gaining ConfigMaps first: the record in the status, not these, says who owns what.
    writes.sort(key=lambda w: (not w.gains, _name_key(w.name)))
    return Writes(maps=tuple(writes), deletes=tuple(deletes), pods=tuple(annotate))
