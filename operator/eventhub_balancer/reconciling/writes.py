"""From a plan to the writes that carry it out: only what differs, in a safe order, pure.

An unchanged assignment gives no write at all (a steady state costs no API call). A
ConfigMap whose data differs from what the plan gives its pod is written back, whoever changed
it. The ConfigMaps that gain a partition (or a higher epoch) come first, so that a pod never
sees its partition taken before its successor was told; `handlers.writing` keeps that order.
Those that start a hand-off (a revocation) go with them: the next owner waits for the old
owner's release, and the sooner it is asked, the sooner it comes. So do those that drop only
partitions their pod released, or create a new pod's empty ConfigMap (`takes_nothing`). Only
a write that takes a partition from a pod that may still run it waits for the gains.
The pod annotations are optional (``annotate_pods``): without them, no ``patch`` on pods.
What one pod needs is `pod_writes`; `derive` asks it of every pod of the fleet, and adds the
ConfigMaps that no pod wants any more.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, podassignments, podstates, specs
from eventhub_balancer.reconciling import fleets, observations

#: The ownerReference's kind: Kubernetes collects a pod's ConfigMap with the pod.
POD_KIND: Mapping[str, str] = types.MappingProxyType({"apiVersion": "v1", "kind": "Pod"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapWrite:
    """Create or patch one pod's ConfigMap."""

    name: str
    pod: str
    pod_uid: str
    create: bool
    body: Mapping[str, Any]  # the full object to create, or the merge patch
    resource_version: str | None
    #: a patch only: the uid of the ConfigMap read, so that a retry never lands on another
    #: object recreated under its name
    uid: str = ""
    gains: bool  # it receives a partition or a higher epoch: written before the others lose
    #: it starts a hand-off (marks revoking a partition it held and did not mark so yet) and
    #: takes away nothing but what the pod released (`starts_handoff`): written with the gains,
    #: since the old owner's release, not this cycle's other writes, is what the next owner
    #: waits for
    revokes: bool = False
    #: it starts no hand-off and takes away nothing the pod still runs (`takes_nothing`):
    #: written with the gains, since waiting for them would protect nothing
    lets_go: bool = False
    #: a create only: the Event to post when the name is taken by a ConfigMap the operator did
    #: not write (`squatter`); `deciding` fills it in (it knows the EventHubConsumer)
    squat_event: Mapping[str, Any] | None = None
    #: a patch only: the data's generation as read (its exact text); with ``uid``, the
    #: precondition of a patch that changes the data alone (`data_only`)
    generation: str | None = None

    @property
    def data_only(self) -> bool:
        """A patch of the data and nothing else, of a ConfigMap read with a generation: its
        precondition can be the ConfigMap's uid and data generation instead of its
        resourceVersion, so that a pod's acknowledgement written meanwhile (its annotations,
        never its data) does not make it conflict."""
        return (
            not self.create
            and bool(self.uid)
            and self.generation is not None
            and set(self.body) == {"data"}
        )


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


def by_owner(
    assignment: Mapping[models.PartitionId, models.Ownership],
) -> dict[str, dict[models.PartitionId, podassignments.PartitionEntry]]:
    """Each owner's partitions, in one pass (a cycle's cost stays linear in the fleet)."""
    grouped: dict[str, dict[models.PartitionId, podassignments.PartitionEntry]] = {}
    # Most partitions share a few moments: each is made a datetime once per call.
    moments: dict[float, datetime.datetime] = {}
    for pid, o in assignment.items():
        if o.owner is not None:
            if o.since not in moments:
                moments[o.since] = podstates.from_seconds(o.since)
            grouped.setdefault(o.owner, {})[pid] = podassignments.PartitionEntry(
                epoch=o.epoch, state=o.state, since=moments[o.since]
            )
    return grouped


def _owner_reference(pod: podstates.PodState) -> dict[str, Any]:
    # Kubernetes collects the ConfigMap with the pod; no blockOwnerDeletion (no finalizer RBAC).
    return {**POD_KIND, "name": pod.name, "uid": pod.uid, "controller": False}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodWrites:
    """What one pod needs: the name of its ConfigMap (None: it needs none, and one left over
    is deleted), and the ConfigMap write and pod annotation that differ, if any."""

    wanted: str | None = None
    map: MapWrite | None = None
    annotation: PodAnnotation | None = None


NOTHING = PodWrites()


def pod_writes(
    pod: podstates.PodState,
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    partitions: Mapping[models.PartitionId, podassignments.PartitionEntry],
    cm: observations.StoredMap | None,
    annotations: Mapping[str, str],
    problem: bool,
    annotate_pods: bool,
) -> PodWrites:
    """What ``pod`` needs written for ``partitions``, given its ConfigMap ``cm`` as read."""
    if pod.state is None:
        return NOTHING
    name = cm.name if cm is not None else configmaps.configmap_name(consumer=consumer, pod=pod.name)
    if cm is None and not partitions and pod.state == "terminating":
        return NOTHING
    same_pod = cm is not None and (not cm.pod_uid or cm.pod_uid == pod.uid) and cm.pod == pod.name
    current = cm.data if (cm is not None and same_pod) else None
    if cm is not None and not same_pod:
        # Keep counting generations up: the pod may compare them across incarnations.
        current = {configmaps.KEY_GENERATION: str(cm.parsed.generation)}
    data = podassignments.desired_data(
        spec=spec,
        consumer=consumer,
        pod=pod.name,
        partitions=partitions,
        current=current,
    )
    before = {pid: e.epoch for pid, e in (cm.parsed.partitions.items() if cm is not None else ())}
    gains = any(before.get(pid, -1) < e.epoch for pid, e in partitions.items())
    write: MapWrite | None = None
    if cm is None:
        assert data is not None
        write = MapWrite(
            name=name,
            pod=pod.name,
            pod_uid=pod.uid,
            create=True,
            resource_version=None,
            gains=gains,
            lets_go=not partitions,
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
    elif data is not None or not same_pod or problem:
        if data is None:  # parsed cleanly but flagged (e.g. a claim it lost): rewrite
            data = podassignments.build_data(
                spec=spec,
                consumer=consumer,
                pod=pod.name,
                generation=cm.parsed.generation + 1,
                partitions=partitions,
            )
        patch: dict[str, Any] = {"data": {**{k: None for k in cm.data if k not in data}, **data}}
        early = premature(cm, partitions) if same_pod else None
        if early is not None:
            # Written before the revocation it would answer: it must not end the hand-off the
            # moment the revocation lands. Dropped under the ConfigMap's resourceVersion, with
            # the revocation itself; a pod writes its releases again once it applied them.
            patch["metadata"] = {
                "annotations": {
                    configmaps.ANNOTATION_RELEASED: configmaps.build_released(early)
                    if early
                    else None
                }
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
        released = configmaps.parse_released(cm.annotations)
        revokes = same_pod and starts_handoff(cm.parsed.partitions, partitions, released=released)
        lets_go = (
            same_pod
            and not revokes
            and takes_nothing(cm.parsed.partitions, partitions, released=released)
        )
        write = MapWrite(
            name=name,
            pod=pod.name,
            pod_uid=pod.uid,
            create=False,
            resource_version=cm.resource_version or None,
            uid=cm.uid,
            gains=gains,
            revokes=revokes,
            lets_go=lets_go,
            body=patch,
            generation=cm.data.get(configmaps.KEY_GENERATION),
        )
    annotation = None
    if annotate_pods and pod.state != "terminating":
        desired = configmaps.pod_annotations(consumer=consumer, partitions=partitions)
        has_ours = configmaps.POD_ANNOTATION_PARTITIONS in annotations
        differs = any(annotations.get(k) != v for k, v in desired.items())
        if differs and (partitions or has_ours):
            annotation = PodAnnotation(pod=pod.name, annotations=desired)
    return PodWrites(wanted=name, map=write, annotation=annotation)


def squatter(found: Mapping[str, Any], write: MapWrite) -> str | None:
    """Why ``found``, the ConfigMap that already holds the name ``write`` was to create, is
    not the operator's own write for that pod; None: it is (another replica's, or this one's
    whose answer was lost), and the cycle only reads afresh and decides again.

    Nobody but the operator should create a ConfigMap under a pod's fixed name: one that was
    there first is not trusted, whatever it says."""
    meta: Mapping[str, Any] = found.get("metadata") or {}
    wanted: Mapping[str, Any] = write.body.get("metadata") or {}
    labels: Mapping[str, Any] = meta.get("labels") or {}
    wanted_labels: Mapping[str, Any] = wanted.get("labels") or {}
    data: Mapping[str, Any] = found.get("data") or {}
    owners = [
        r
        for r in meta.get("ownerReferences") or []
        if isinstance(r, Mapping) and r.get("kind") == "Pod" and r.get("uid") == write.pod_uid
    ]
    if any(labels.get(k) != v for k, v in wanted_labels.items()):
        return "it lacks the operator's labels"
    if (meta.get("annotations") or {}).get(configmaps.ANNOTATION_POD_UID) != write.pod_uid:
        return "its pod-uid annotation is not the pod's"
    if not owners:
        return "the pod does not own it"
    if data.get(configmaps.KEY_POD) != write.pod or data.get(configmaps.KEY_CONSUMER) != (
        write.body.get("data") or {}
    ).get(configmaps.KEY_CONSUMER):
        return "its data names another pod or consumer"
    return None


def premature(
    cm: observations.StoredMap,
    partitions: Mapping[models.PartitionId, podassignments.PartitionEntry],
) -> dict[str, int] | None:
    """The pod's ``released`` annotation without the releases it wrote ahead of a revocation
    that this write starts (``partitions`` revokes the partition at that epoch, ``cm``'s data
    does not yet); None: there are none, the annotation stays as it is."""
    released = configmaps.parse_released(cm.annotations)
    if not released:
        return None
    early = set()
    for pid, epoch in released.items():
        new = partitions.get(pid)
        if new is None or new.state != "revoking" or new.epoch != epoch:
            continue
        old = cm.parsed.partitions.get(pid)
        if old is None or old.state != "revoking" or old.epoch != epoch:
            early.add(pid)
    if not early:
        return None
    return {str(pid): epoch for pid, epoch in released.items() if pid not in early}


def takes_nothing(
    before: Mapping[models.PartitionId, podassignments.PartitionEntry],
    after: Mapping[models.PartitionId, podassignments.PartitionEntry],
    *,
    released: Mapping[models.PartitionId, int] | None = None,
) -> bool:
    """Whether ``before`` to ``after`` drops a partition, and only those the pod released
    (``released``) at the epoch it held: the pod stopped them, whenever the write lands."""
    return bool(before.keys() - after.keys()) and _drops_only_released(before, after, released)


def _drops_only_released(
    before: Mapping[models.PartitionId, podassignments.PartitionEntry],
    after: Mapping[models.PartitionId, podassignments.PartitionEntry],
    released: Mapping[models.PartitionId, int] | None,
) -> bool:
    """Whether every partition dropped was released (partition -> epoch) at the epoch held."""
    let_go = released or {}
    return all(let_go.get(pid) == old.epoch for pid, old in before.items() if pid not in after)


def starts_handoff(
    before: Mapping[models.PartitionId, podassignments.PartitionEntry],
    after: Mapping[models.PartitionId, podassignments.PartitionEntry],
    *,
    released: Mapping[models.PartitionId, int] | None = None,
) -> bool:
    """Whether ``before`` to ``after`` marks a partition revoking that it held owned, and drops
    only what the pod released: it asks for a release and takes away nothing the pod runs (an
    old owner's next revocation goes in the write that drops what it let go of)."""
    if not _drops_only_released(before, after, released):
        return False
    return any(
        entry.state == "revoking"
        and (old := before.get(pid)) is not None
        and old.state != "revoking"
        and old.epoch == entry.epoch
        for pid, entry in after.items()
    )


def assemble(needs: Sequence[PodWrites], unwanted: Sequence[observations.StoredMap]) -> Writes:
    """The cycle's writes from the pods that need one and the ConfigMaps nobody wants (but
    those deleted already, that someone else's finalizer holds). Gaining ConfigMaps first, with
    those that revoke or let go: the record in the status, not these, says who owns what."""
    maps = sorted(
        (n.map for n in needs if n.map is not None),
        key=lambda w: (not (w.gains or w.revokes or w.lets_go), models.name_key(w.name)),
    )
    deletes = [
        MapDelete(name=cm.name, uid=cm.uid, pod=cm.pod)
        for cm in sorted(unwanted, key=lambda m: models.name_key(m.name))
        if not cm.deleting
    ]
    annotate = sorted(
        (n.annotation for n in needs if n.annotation is not None),
        key=lambda a: models.name_key(a.pod),
    )
    return Writes(maps=tuple(maps), deletes=tuple(deletes), pods=tuple(annotate))


def derive(
    *,
    fleet: fleets.Fleet,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    assignment: Mapping[models.PartitionId, models.Ownership],
    problems: Mapping[str, tuple[str, ...]],
    annotate_pods: bool,
) -> Writes:
    """Only what differs: an unchanged assignment gives no writes at all."""
    owners = by_owner(assignment)
    needs: list[PodWrites] = []
    for name, pod in fleet.states.items():
        # Only the ConfigMap of the pod's fixed name, the only one a pod applies: one written
        # for it under an older naming scheme is not updated in place but deleted as nobody's,
        # and the pod's own is created.
        cm = fleet.stored.get(fleet.pods[name].map_name)
        needs.append(
            pod_writes(
                pod,
                spec=spec,
                consumer=consumer,
                namespace=namespace,
                partitions=owners.get(name, {}),
                cm=cm,
                annotations=fleet.pods[name].annotations,
                problem=cm is not None and cm.name in problems,
                annotate_pods=annotate_pods,
            )
        )
    wanted = {n.wanted for n in needs}
    return assemble(needs, [cm for name, cm in fleet.stored.items() if name not in wanted])
