"""A consumer's pods and ConfigMaps as a decision reads them, advanced by what changed, pure.

A cycle's observation holds every pod and ConfigMap of the consumer, but from one cycle to the
next only a few of them change. A `Fleet` keeps what the decision reads of each (the member
state, the labels and annotations, the parsed ConfigMap) with the sorted members the planner
takes, and `advance` makes the next fleet from the last one: what did not change is carried
over as it is, and each pod and ConfigMap that did is read again. It says which changed
(``changed_pods``, ``changed_maps``), so that the steps after it (`readbacks`, `writes`,
`statuses`) work on those alone.

What tells that a body did not change: it is the very object read last time (the watch's
cache hands out the same object until an event replaces it), or what the decision reads of it
is equal (a new object, as a watch event or a test gives it). A resourceVersion is never
taken for the content: `advance` carries over no body that reads otherwise.

A fleet never changes a decision: advancing gives the fleet that reading every body afresh
gives (`build`), and `tests/reconciling/test_fleets.py` holds it to that.
"""

from __future__ import annotations

import bisect
import collections
import copy
import dataclasses
import itertools
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import podstates, specs
from eventhub_balancer.reconciling import observations

Body = Mapping[str, Any]

Keys = tuple[models.NameKey, ...]

_SERIALS = itertools.count(1)
#: Fleets kept, one per consumer: past this many the least recently used goes first.
MAX_KEPT = 4096
_LAST: collections.OrderedDict[Hashable, Fleet] = collections.OrderedDict()


def last(scope: Hashable) -> Fleet | None:
    """The fleet the last decision of ``scope`` read, to advance from; None: none kept."""
    return _LAST.get(scope)


def remember(fleet: Fleet) -> None:
    _LAST[fleet.scope] = fleet
    _LAST.move_to_end(fleet.scope)
    while len(_LAST) > MAX_KEPT:
        _LAST.popitem(last=False)


def forget() -> None:
    """Every fleet dropped: the next decision of each consumer reads its fleet whole."""
    _LAST.clear()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRead:
    """What a decision reads of one pod, with the body it was read from."""

    body: Body
    #: a copy of `podstates.state_inputs` of the body, and the labels and annotations
    inputs: tuple[object, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    state: podstates.PodState

    @property
    def member(self) -> models.Member | None:
        s = self.state
        if s.state is None:
            return None
        return models.Member(
            name=models.MemberName(s.name), state=s.state, since=podstates.to_seconds(s.since)
        )


def read_pod(body: Body) -> PodRead:
    meta = body.get("metadata") or {}
    return PodRead(
        body=body,
        inputs=copy.deepcopy(podstates.state_inputs(body)),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        state=podstates.pod_state(body),
    )


def _same_pod(kept: PodRead, body: Body) -> bool:
    meta = body.get("metadata") or {}
    return (
        kept.inputs == podstates.state_inputs(body)
        and kept.labels == (meta.get("labels") or {})
        and kept.annotations == (meta.get("annotations") or {})
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapRead:
    """One ConfigMap of the consumer, parsed, with the body it was read from."""

    body: Body
    stored: observations.StoredMap


def _read_map(body: Body) -> MapRead:
    stored = observations.stored_map(body)
    return MapRead(body=body, stored=stored)


def _same_map(kept: MapRead, body: Body) -> bool:
    """The same object, or one that reads the same, uid and resourceVersion included (a write
    names the version it read)."""
    meta = body.get("metadata") or {}
    return (
        kept.stored.resource_version == str(meta.get("resourceVersion", ""))
        and kept.stored.uid == str(meta.get("uid", ""))
        and observations.reads_as(kept.stored, body)
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fleet:
    """The consumer's pods (those its selector matches) and ConfigMaps, as read."""

    #: (namespace, consumer, selector): a fleet is advanced only within its scope
    scope: Hashable
    pods: Mapping[str, PodRead]
    #: each pod's member state, by name (what `readbacks` and `writes` take)
    states: Mapping[str, podstates.PodState]
    #: the pods' names by `models.name_key`, and those keys
    names: tuple[str, ...]
    name_keys: Keys
    #: the consumer's ConfigMaps by name (a corrupt one counts by its label)
    maps: Mapping[str, MapRead]
    stored: Mapping[str, observations.StoredMap]
    #: the planner's members: the pods that are not finished, by `models.name_key`
    members: tuple[models.Member, ...]
    member_keys: Keys
    #: the distinct label sets of the pods, each with how many pods carry it
    label_sets: Mapping[frozenset[tuple[str, str]], int]
    #: this fleet, and the one it was advanced from (None: read whole, everything changed),
    #: by number: a fleet keeps no reference to its history
    serial: int = dataclasses.field(default_factory=lambda: next(_SERIALS))
    parent: int | None = None
    changed_pods: frozenset[str] = frozenset()
    changed_maps: frozenset[str] = frozenset()

    def stored_maps(self) -> list[observations.StoredMap]:
        return list(self.stored.values())

    def pod_labels(self) -> list[Mapping[str, str]]:
        """One of each distinct label set (`conflicts.find` asks whether any pod matches)."""
        return [dict(key) for key in self.label_sets]


def _name(body: Body) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def scope_of(namespace: str, consumer: str, selector: specs.Selector) -> Hashable:
    return (namespace, consumer, selector.to_query())


def _matches(selector: specs.Selector, body: Body) -> bool:
    return selector.matches((body.get("metadata") or {}).get("labels") or {})


def build(
    *,
    scope: Hashable,
    pods: Iterable[Body],
    configmaps: Iterable[Body],
    selector: specs.Selector,
    consumer: str,
) -> Fleet:
    """The fleet read whole: every body read afresh."""
    reads = {_name(b): read_pod(b) for b in pods if _name(b) and _matches(selector, b)}
    maps: dict[str, MapRead] = {}
    for body in configmaps:
        map_read = _read_map(body)
        if map_read.stored.parsed.consumer in (consumer, ""):
            maps[map_read.stored.name] = map_read
    label_sets: dict[frozenset[tuple[str, str]], int] = {}
    for read in reads.values():
        key = frozenset(read.labels.items())
        label_sets[key] = label_sets.get(key, 0) + 1
    members = [m for read in reads.values() if (m := read.member) is not None]
    members.sort(key=lambda m: models.name_key(m.name))
    names = sorted(reads, key=models.name_key)
    return Fleet(
        scope=scope,
        pods=reads,
        states={name: read.state for name, read in reads.items()},
        names=tuple(names),
        name_keys=tuple(map(models.name_key, names)),
        maps=maps,
        stored={name: read.stored for name, read in maps.items()},
        members=tuple(members),
        member_keys=tuple(models.name_key(m.name) for m in members),
        label_sets=label_sets,
        changed_pods=frozenset(reads),
        changed_maps=frozenset(maps),
    )


def advance(
    previous: Fleet | None,
    *,
    scope: Hashable,
    pods: Iterable[Body],
    configmaps: Iterable[Body],
    selector: specs.Selector,
    consumer: str,
) -> Fleet:
    """The fleet of ``pods`` and ``configmaps``, carried over from ``previous`` where they
    did not change (``previous`` itself when nothing did); read whole without a previous
    fleet of the same scope."""
    if previous is None or previous.scope != scope:
        return build(
            scope=scope, pods=pods, configmaps=configmaps, selector=selector, consumer=consumer
        )
    reads: dict[str, PodRead] = {}
    changed_pods: set[str] = set()
    kept_pods = previous.pods
    repointed = False
    for body in pods:
        name = _name(body)
        kept = kept_pods.get(name)
        if kept is not None and kept.body is body:
            reads[name] = kept
        elif kept is not None and _same_pod(kept, body):
            # Kept, and pointed at this body: the next cycle's same object is found by identity.
            reads[name] = dataclasses.replace(kept, body=body)
            repointed = True
        elif name and _matches(selector, body):
            reads[name] = read_pod(body)
            changed_pods.add(name)
    changed_pods.update(kept_pods.keys() - reads.keys())
    maps: dict[str, MapRead] = {}
    changed_maps: set[str] = set()
    kept_maps = previous.maps
    for body in configmaps:
        name = _name(body)
        kept_map = kept_maps.get(name)
        if kept_map is not None and kept_map.body is body:
            maps[name] = kept_map
            continue
        if kept_map is not None and _same_map(kept_map, body):
            maps[name] = dataclasses.replace(kept_map, body=body)
            repointed = True
            continue
        read = _read_map(body)
        if read.stored.parsed.consumer in (consumer, ""):
            maps[read.stored.name] = read
            changed_maps.add(read.stored.name)
    changed_maps.update(kept_maps.keys() - maps.keys())
    if not (changed_pods or changed_maps):
        # The same fleet (its serial too), with the bodies as given this time.
        return dataclasses.replace(previous, pods=reads, maps=maps) if repointed else previous
    states = dict(previous.states)
    for name in changed_pods:
        if name in reads:
            states[name] = reads[name].state
        else:
            states.pop(name, None)
    # The bodies' order, as a fresh read gives it (the first of two that read the same wins).
    if list(states) != list(reads):
        states = {name: states[name] for name in reads}
    stored = dict(previous.stored)
    for name in changed_maps:
        if name in maps:
            stored[name] = maps[name].stored
        else:
            stored.pop(name, None)
    if list(stored) != list(maps):
        stored = {name: stored[name] for name in maps}
    names, name_keys = _names(previous, reads, changed_pods)
    members, member_keys = _members(previous, reads, changed_pods)
    return Fleet(
        scope=scope,
        pods=reads,
        states=states,
        names=names,
        name_keys=name_keys,
        maps=maps,
        stored=stored,
        members=members,
        member_keys=member_keys,
        label_sets=_label_sets(previous, reads, changed_pods),
        parent=previous.serial,
        changed_pods=frozenset(changed_pods),
        changed_maps=frozenset(changed_maps),
    )


def _names(
    previous: Fleet, reads: Mapping[str, PodRead], changed: set[str]
) -> tuple[tuple[str, ...], Keys]:
    """The previous names with the changed pods' taken out or put in, at their key."""
    names, keys = list(previous.names), list(previous.name_keys)
    for name in changed:
        key = models.name_key(name)
        at = bisect.bisect_left(keys, key)
        present = at < len(keys) and keys[at] == key
        if name in reads and not present:
            names.insert(at, name)
            keys.insert(at, key)
        elif name not in reads and present:
            del names[at], keys[at]
    return tuple(names), tuple(keys)


def _members(
    previous: Fleet, reads: Mapping[str, PodRead], changed: set[str]
) -> tuple[tuple[models.Member, ...], Keys]:
    """The previous members with those of the changed pods taken out and put in again."""
    members, keys = list(previous.members), list(previous.member_keys)
    for name in changed:
        key = models.name_key(name)
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            del members[at], keys[at]
        read = reads.get(name)
        member = read.member if read is not None else None
        if member is not None:
            at = bisect.bisect_left(keys, key)
            members.insert(at, member)
            keys.insert(at, key)
    return tuple(members), tuple(keys)


def _label_sets(
    previous: Fleet, reads: Mapping[str, PodRead], changed: set[str]
) -> Mapping[frozenset[tuple[str, str]], int]:
    if not changed:
        return previous.label_sets
    counts = dict(previous.label_sets)
    for name in changed:
        old = previous.pods.get(name)
        if old is not None:
            key = frozenset(old.labels.items())
            counts[key] -= 1
            if not counts[key]:
                del counts[key]
        new = reads.get(name)
        if new is not None:
            key = frozenset(new.labels.items())
            counts[key] = counts.get(key, 0) + 1
    return counts
