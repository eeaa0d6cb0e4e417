"""The pods and ConfigMaps a consumer concerns, as a decision reads them, and what its
ConfigMaps claim wrongly, pure.

Reading a pod (its member state) and a ConfigMap (its parsed data) is most of what a cold
decision costs at a thousand pods, and from one cycle to the next almost none of them change.
A `Fleet` keeps the read of each body together with the body itself; the next decision's
`advance` reads again only the bodies that are not those very objects. The cache the handlers
read from hands out the same object until an event replaces it, so an unchanged pod costs an
identity check. A body that is a new object is read afresh, whatever it holds: nothing here
compares contents, so nothing here can mistake one content for another.

The sums a decision reads (the planner's sorted members, each pod's current ConfigMap, the
NotReady pods, the distinct label sets) are made over the whole fleet whenever anything
changed: they cost a pass over names, not a read of bodies. A fleet is a plain frozen value:
the caller keeps it (`decisions.Carry`), no module does.

A ConfigMap's ``data`` is the operator's output, compared with its record, never believed
(`readbacks`): a ConfigMap that claims a partition the record does not give its pod (or at
another epoch) is tampered with, and is put back and reported (`configmap_faults`, `beyond_record`).
Every decision checks every ConfigMap: a pass over the partitions they name, which costs
little next to reading them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import (
    configmaps,
    partitionreports,
    podassignments,
    podstates,
    specs,
)
from eventhub_balancer.reconciling import observations, records

Body = Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRead:
    """What a decision reads of one pod, with the body it was read from."""

    body: Body
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    state: podstates.PodState
    #: the name the pod's ConfigMap gets (`configmaps.configmap_name`): a hash, made once
    map_name: str
    #: when the operator first saw its state (`podstates.Sighting`), which bounds its since
    seen: podstates.Sighting | None = None

    def member(self, *, outgoing: bool = False) -> models.Member | None:
        s = self.state
        if s.state is None:
            return None
        return models.Member(
            name=models.MemberName(s.name),
            state=s.state,
            since=podstates.to_seconds(s.since),
            starting=s.starting,
            outgoing=outgoing,
            restarted=s.restarted,
            notready_since=(
                None if s.notready_since is None else podstates.to_seconds(s.notready_since)
            ),
            seen=self.seen.first if self.seen is not None and s.ready else 0.0,
        )


def read_pod(body: Body, *, consumer: str, seen: podstates.Sighting | None = None) -> PodRead:
    meta = body.get("metadata") or {}
    state = podstates.pod_state(body)
    if seen is not None:
        state = seen.applied(state)
    return PodRead(
        body=body,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        state=state,
        map_name=configmaps.configmap_name(consumer=consumer, pod=str(meta.get("name") or "")),
        seen=seen,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapRead:
    """One ConfigMap, parsed, with the body it was read from."""

    body: Body
    stored: observations.StoredMap


def read_map(body: Body) -> MapRead:
    return MapRead(body=body, stored=observations.stored_map(body))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fleet:
    """The consumer's pods (those its selector matches) and ConfigMaps, as read."""

    #: (namespace, consumer, selector): a fleet is carried over only within its scope
    scope: Hashable
    consumer: str
    pods: Mapping[str, PodRead] = dataclasses.field(default_factory=dict)
    #: the consumer's ConfigMaps by name (a corrupt one counts by its label); ConfigMaps read
    #: but of another consumer are kept apart, so that they are not parsed again either
    maps: Mapping[str, MapRead] = dataclasses.field(default_factory=dict)
    others: Mapping[str, MapRead] = dataclasses.field(default_factory=dict)
    #: each pod's member state, by name (what `readbacks` and `writes` take)
    states: Mapping[str, podstates.PodState] = dataclasses.field(default_factory=dict)
    #: the pods' names by `models.name_key`
    names: tuple[str, ...] = ()
    stored: Mapping[str, observations.StoredMap] = dataclasses.field(default_factory=dict)
    #: each pod's ConfigMaps' names (pods with none are absent), by `models.name_key`
    by_pod: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: each pod's current ConfigMap: of a pod that exists and has not finished, for this
    #: incarnation (`readbacks.belongs`), the one of its own name first, else the first by name
    current: Mapping[str, observations.StoredMap] = dataclasses.field(default_factory=dict)
    #: the pods whose current ConfigMap carries partition reports
    reporting: frozenset[str] = frozenset()
    #: the planner's members: the pods that are not finished, by `models.name_key`
    members: tuple[models.Member, ...] = ()
    #: how many pods are Ready, and which are NotReady
    ready: int = 0
    notready: frozenset[str] = frozenset()
    #: the distinct label sets of the pods, each with how many pods carry it
    label_sets: Mapping[frozenset[tuple[str, str]], int] = dataclasses.field(default_factory=dict)

    def stored_maps(self) -> list[observations.StoredMap]:
        return list(self.stored.values())

    def pod_labels(self) -> list[Mapping[str, str]]:
        """One of each distinct label set (`conflicts.find` asks whether any pod matches)."""
        return [dict(key) for key in self.label_sets]

    def concerned(self) -> frozenset[str]:
        """The pods the consumer's events concern: its pods, and those its ConfigMaps name."""
        return frozenset(self.states.keys() | self.by_pod.keys())

    def idle(
        self, entries: Mapping[models.PartitionId, models.Ownership]
    ) -> frozenset[models.PartitionId]:
        """The ownerless partitions of ``entries`` that no pod's current ConfigMap names:
        nobody processes them (`models.Scenario.idle`). A consumer created again finds its
        pods' ConfigMaps, and every partition they hold is ownerless in it: those are not.
        The ConfigMaps are looked at only when some partition is ownerless."""
        ownerless = frozenset(p for p, e in entries.items() if e.owner is None)
        return ownerless.difference(*self.named()) if ownerless else ownerless

    def named(self) -> list[Iterable[str]]:
        """The partitions each pod's current ConfigMap names, at any epoch, in any state."""
        return [cm.parsed.partitions for cm in self.current.values()]


def scope_of(namespace: str, consumer: str, selector: specs.Selector) -> Hashable:
    return (namespace, consumer, selector.to_query())


def _name(body: Body) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def build(
    *,
    scope: Hashable,
    pods: Iterable[Body],
    configmaps: Iterable[Body],
    selector: specs.Selector,
    consumer: str,
) -> Fleet:
    """The fleet read whole: every body read afresh."""
    return advance(
        None, scope=scope, pods=pods, configmaps=configmaps, selector=selector, consumer=consumer
    )


def advance(
    previous: Fleet | None,
    *,
    scope: Hashable,
    pods: Iterable[Body],
    configmaps: Iterable[Body],
    selector: specs.Selector,
    consumer: str,
    sightings: Mapping[str, podstates.Sighting] | None = None,
) -> Fleet:
    """The fleet of ``pods`` and ``configmaps``, each read carried over from ``previous`` when
    its body (and its pod's `podstates.Sighting`) is the very object read there (``previous``
    itself when every one is); read whole without a previous fleet of the same scope."""
    if previous is not None and previous.scope != scope:
        previous = None
    kept_pods = previous.pods if previous is not None else {}
    kept_maps = {**previous.maps, **previous.others} if previous is not None else {}
    pod_reads: dict[str, PodRead] = {}
    fresh = False
    for body in pods:
        name = _name(body)
        if not name:
            continue
        if not selector.matches((body.get("metadata") or {}).get("labels") or {}):
            continue  # a list call may be looser than the selector
        read, seen = kept_pods.get(name), sightings.get(name) if sightings else None
        if read is None or read.body is not body or read.seen is not seen:
            read, fresh = read_pod(body, consumer=consumer, seen=seen), True
        pod_reads[name] = read
    ours: dict[str, MapRead] = {}
    others: dict[str, MapRead] = {}
    for body in configmaps:
        name = _name(body)
        if not name:
            continue
        map_read = kept_maps.get(name)
        if map_read is None or map_read.body is not body:
            map_read, fresh = read_map(body), True
        if map_read.stored.parsed.consumer in (consumer, ""):
            ours[name] = map_read
        else:
            others[name] = map_read
    if (
        previous is not None
        and not fresh
        and len(pod_reads) == len(previous.pods)
        and len(ours) == len(previous.maps)
        and len(others) == len(previous.others)
    ):
        return previous
    return _summed(scope=scope, consumer=consumer, pods=pod_reads, maps=ours, others=others)


def _summed(
    *,
    scope: Hashable,
    consumer: str,
    pods: Mapping[str, PodRead],
    maps: Mapping[str, MapRead],
    others: Mapping[str, MapRead],
) -> Fleet:
    names = tuple(sorted(pods, key=models.name_key))
    states = {name: pods[name].state for name in names}
    label_sets: dict[frozenset[tuple[str, str]], int] = {}
    members: list[models.Member] = []
    ready = 0
    notready: set[str] = set()
    outgoing = podstates.outgoing(states.values())
    for name in names:
        read = pods[name]
        key = frozenset(read.labels.items())
        label_sets[key] = label_sets.get(key, 0) + 1
        if (member := read.member(outgoing=name in outgoing)) is not None:
            members.append(member)
        ready += read.state.state == "ready"
        if read.state.state == "notready":
            notready.add(name)
    stored = {name: read.stored for name, read in maps.items()}
    by_pod: dict[str, list[str]] = {}
    for name in sorted(stored, key=models.name_key):
        by_pod.setdefault(stored[name].pod, []).append(name)
    current: dict[str, observations.StoredMap] = {}
    reporting: set[str] = set()
    for pod, named in by_pod.items():
        holder = pods.get(pod)
        own = holder.map_name if holder is not None else ""
        cm = _current(pod, states=states, stored=stored, named=named, own=own)
        if cm is not None:
            current[pod] = cm
            if cm.annotations.get(partitionreports.ANNOTATION):
                reporting.add(pod)
    return Fleet(
        scope=scope,
        consumer=consumer,
        pods=dict(pods),
        maps=dict(maps),
        others=dict(others),
        states=states,
        names=names,
        stored=stored,
        by_pod={pod: tuple(named) for pod, named in by_pod.items()},
        current=current,
        reporting=frozenset(reporting),
        members=tuple(members),
        ready=ready,
        notready=frozenset(notready),
        label_sets=label_sets,
    )


def _current(
    pod: str,
    *,
    states: Mapping[str, podstates.PodState],
    stored: Mapping[str, observations.StoredMap],
    named: list[str],
    own: str,
) -> observations.StoredMap | None:
    """The pod's current ConfigMap (`Fleet.current`); None: it has none, or is gone. ``own``:
    the name the pod's ConfigMap gets."""
    state = states.get(pod)
    if state is None or state.state is None:
        return None
    for name in (own, *named) if own in named else named:
        cm = stored[name]
        if not cm.pod_uid or cm.pod_uid == state.uid:
            return cm
    return None


Record = Mapping[models.PartitionId, records.Recorded]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Found:
    """ConfigMap name -> what is wrong with it; and the part of that it claims beyond the
    record (tampering)."""

    problems: Mapping[str, tuple[str, ...]]
    tampered: Mapping[str, tuple[str, ...]]


def beyond_record(
    cm: observations.StoredMap, recorded: Record, status_epochs: Mapping[str, Any]
) -> tuple[str, ...]:
    """What ``cm``'s data says that the operator did not write there.

    The operator's own writes can run ahead of its record by one interrupted cycle (a
    partition at exactly the epoch ``status.epochs`` holds, or ``revoking`` where the record
    still says ``owned``) or behind it (an older epoch than the record's, not yet rewritten; or
    ``owned`` from before the revocation the record holds: `revocation_unwritten`). Anything
    else is someone else's doing.
    """
    claims = [
        f"data key {k[:40]!r} is not the operator's"
        for k in cm.data
        if k not in configmaps.DATA_KEYS
    ]
    claims += [f"data: {p}" for p in cm.parsed.problems if "partition" in p]
    if not recorded and not status_epochs:
        # No record to hold the partitions against: a new EventHubConsumer, or one created
        # again under the same name, whose pods' ConfigMaps outlived it (the pod owns its
        # ConfigMap). Their partitions are read back and planned afresh, not someone's doing.
        return tuple(claims)
    for pid, entry in cm.parsed.partitions.items():
        mine = recorded.get(pid)
        same = mine is not None and mine.pod == cm.pod and mine.epoch == entry.epoch
        if same and mine is not None and entry.state in (mine.state, "revoking"):
            continue  # as recorded, or revoking ahead of the record (an interrupted cycle)
        if same and mine is not None and revocation_unwritten(entry, mine):
            continue
        latest = status_epochs.get(pid)
        if entry.epoch == latest and (mine is None or mine.epoch < entry.epoch):
            continue
        if mine is not None and entry.epoch < mine.epoch:
            # An older grant the operator has not rewritten yet (a cycle failed between its
            # ConfigMap writes): fenced out by the record's epoch, so nothing to gain by it.
            # It is rewritten like any stale entry, but it is nobody's tampering.
            continue
        held = f"{mine.pod} at epoch {mine.epoch}" if mine is not None else "nobody"
        claims.append(
            f"partition {pid} at epoch {entry.epoch} ({entry.state}) is not assigned to "
            f"{cm.pod or 'this pod'}: the operator's record gives it to {held}"
        )
    return tuple(claims)


def revocation_unwritten(entry: podassignments.PartitionEntry, mine: records.Recorded) -> bool:
    """The record revokes what the ConfigMap shows owned since before the revocation began: the
    operator's write of it is not made yet (refused, throttled, or a cycle stopped between its
    status and its ConfigMaps), nobody's edit. Owned since then, or with no time, is an edit."""
    since = entry.since
    return mine.state == "revoking" and since is not None and since.timestamp() < (mine.since or 0)


def configmap_faults(
    maps: Iterable[observations.StoredMap], recorded: Record, status_epochs: Mapping[str, Any]
) -> Found:
    """The findings over every one of ``maps``."""
    claims = {}
    flagged = {}
    for cm in maps:
        if cm.parsed.problems:
            flagged[cm.name] = cm
        if found := beyond_record(cm, recorded, status_epochs):
            claims[cm.name] = found
    return _found(flagged, claims)


def _found(
    flagged: Mapping[str, observations.StoredMap], claims: Mapping[str, tuple[str, ...]]
) -> Found:
    problems = {
        name: (*(flagged[name].parsed.problems if name in flagged else ()), *claims.get(name, ()))
        for name in flagged.keys() | claims.keys()
    }
    return Found(problems=problems, tampered=dict(claims))
