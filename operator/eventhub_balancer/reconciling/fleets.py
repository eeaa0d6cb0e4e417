"""A consumer's pods and ConfigMaps as a decision reads them, advanced by what changed, pure.

A cycle's observation holds every pod and ConfigMap of the consumer, but from one cycle to the
next only a few of them change. A `Fleet` keeps what the decision reads of each (the member
state, the labels and annotations, the parsed ConfigMap), and what it sums up of them (the
planner's sorted members, each pod's current ConfigMap, the pods that are NotReady or report
partitions in trouble, the distinct label sets). The next fleet is made from the last one by
the changes alone: `advance_by` takes the bodies of the pods and ConfigMaps that changed (the
watch's cache names them), `advance` takes every body and finds the changed ones by identity.
Either way each sum is patched at the changed names, never recomputed over the fleet, and the
fleet says which pods, ConfigMaps and current ConfigMaps changed, so that the steps after it
(`readbacks`, `needs`, `statuses`) work on those alone.

What tells that a body did not change: it is the very object read last time (the watch's
cache hands out the same object until an event replaces it), or what the decision reads of it
is equal (a new object, as a watch event or a test gives it; for a ConfigMap also its uid and
resourceVersion, which a write names). A resourceVersion alone is never taken for the
content.

A fleet never changes a decision: a fleet advanced through any changes is the fleet that
reading every body whole gives (`build`, which is `advance_by` from an empty fleet), and
`tests/reconciling/test_fleets.py` holds it to that. Nothing in a decision depends on the
order of the fleet's mappings; ``names`` and ``members`` are sorted by `models.name_key`.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, partitionreports, podstates, specs
from eventhub_balancer.reconciling import memos, objectreads, observations

Body = Mapping[str, Any]
Keys = tuple[models.NameKey, ...]
T = TypeVar("T")

_SERIALS = itertools.count(1)
#: The last fleet of each consumer.
_LAST: memos.Latest[Fleet] = memos.Latest()
#: The name each pod's ConfigMap gets, by (consumer, pod).
_canonical = functools.lru_cache(maxsize=8192)(configmaps.configmap_name)


def last(scope: Hashable) -> Fleet | None:
    """The fleet the last decision of ``scope`` read, to advance from; None: none kept."""
    return _LAST.get(scope)


def remember(fleet: Fleet) -> None:
    _LAST.put(fleet.scope, fleet)


def forget() -> None:
    """Every fleet dropped: the next decision of each consumer reads its fleet whole."""
    _LAST.clear()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fleet:
    """The consumer's pods (those its selector matches) and ConfigMaps, as read."""

    #: (namespace, consumer, selector): a fleet is advanced only within its scope
    scope: Hashable
    consumer: str
    pods: Mapping[str, objectreads.PodRead] = dataclasses.field(default_factory=dict)
    #: each pod's member state, by name (what `readbacks` and `writes` take)
    states: Mapping[str, podstates.PodState] = dataclasses.field(default_factory=dict)
    #: the pods' names by `models.name_key`, and those keys
    names: tuple[str, ...] = ()
    name_keys: Keys = ()
    #: the consumer's ConfigMaps by name (a corrupt one counts by its label)
    maps: Mapping[str, objectreads.MapRead] = dataclasses.field(default_factory=dict)
    stored: Mapping[str, observations.StoredMap] = dataclasses.field(default_factory=dict)
    #: each pod's ConfigMaps' names (pods with none are absent), by `models.name_key`
    by_pod: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: each pod by the name its ConfigMap gets
    canon: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: each pod's current ConfigMap: of a pod that exists and has not finished, for this
    #: incarnation (`readbacks.belongs`), the one of its own name first, else the first by name
    current: Mapping[str, observations.StoredMap] = dataclasses.field(default_factory=dict)
    #: the pods whose current ConfigMap carries partition reports
    reporting: frozenset[str] = frozenset()
    #: the planner's members: the pods that are not finished, by `models.name_key`
    members: tuple[models.Member, ...] = ()
    member_keys: Keys = ()
    #: how many pods are Ready, and which are NotReady
    ready: int = 0
    notready: frozenset[str] = frozenset()
    #: the distinct label sets of the pods, each with how many pods carry it
    label_sets: Mapping[frozenset[tuple[str, str]], int] = dataclasses.field(default_factory=dict)
    #: this fleet, and the one it was advanced from (None: read whole, everything changed),
    #: by number: a fleet keeps no reference to its history
    serial: int = dataclasses.field(default_factory=lambda: next(_SERIALS))
    parent: int | None = None
    changed_pods: frozenset[str] = frozenset()
    changed_maps: frozenset[str] = frozenset()
    #: the pods whose current ConfigMap changed (another one, or the same one changed)
    changed_current: frozenset[str] = frozenset()

    def stored_maps(self) -> list[observations.StoredMap]:
        return list(self.stored.values())

    def pod_labels(self) -> list[Mapping[str, str]]:
        """One of each distinct label set (`conflicts.find` asks whether any pod matches)."""
        return [dict(key) for key in self.label_sets]

    def concerned(self) -> frozenset[str]:
        """The pods the consumer's events concern: its pods, and those its ConfigMaps name."""
        return frozenset(self.states.keys() | self.by_pod.keys())


def scope_of(namespace: str, consumer: str, selector: specs.Selector) -> Hashable:
    return (namespace, consumer, selector.to_query())


def _name(body: Body) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def _matches(selector: specs.Selector, body: Body) -> bool:
    return selector.matches((body.get("metadata") or {}).get("labels") or {})


def _ours(read: objectreads.MapRead, consumer: str) -> bool:
    return read.stored.parsed.consumer in (consumer, "")


def build(
    *,
    scope: Hashable,
    pods: Iterable[Body],
    configmaps: Iterable[Body],
    selector: specs.Selector,
    consumer: str,
) -> Fleet:
    """The fleet read whole: every body read afresh."""
    return advance_by(
        Fleet(scope=scope, consumer=consumer),
        pods={_name(b): b for b in pods},
        configmaps={_name(b): b for b in configmaps},
        selector=selector,
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
    """The fleet of every one of ``pods`` and ``configmaps``, carried over from ``previous``
    where they did not change (``previous`` itself when nothing did); read whole without a
    previous fleet of the same scope."""
    if previous is None or previous.scope != scope:
        return build(
            scope=scope, pods=pods, configmaps=configmaps, selector=selector, consumer=consumer
        )
    # One identity check per body; the bodies that are not the objects kept go to advance_by.
    return advance_by(
        previous,
        pods=_not_kept(pods, previous.pods),
        configmaps=_not_kept(configmaps, previous.maps),
        selector=selector,
    )


def _not_kept(
    bodies: Iterable[Body], kept: Mapping[str, objectreads.PodRead | objectreads.MapRead]
) -> dict[str, Body | None]:
    """Each body that is not the very object kept under its name, and None for each name
    kept that no body has."""
    changed: dict[str, Body | None] = {}
    seen: set[str] = set()
    for body in bodies:
        name = _name(body)
        seen.add(name)
        read = kept.get(name)
        if read is None or read.body is not body:
            changed[name] = body
    changed.update(dict.fromkeys(kept.keys() - seen))
    return changed


def advance_by(
    previous: Fleet,
    *,
    pods: Mapping[str, Body | None],
    configmaps: Mapping[str, Body | None],
    selector: specs.Selector,
) -> Fleet:
    """``previous`` with the pods and ConfigMaps named changed: each name's body as it is now
    (None: gone). A body that reads as the kept one is carried over (pointed at the new
    object); ``previous`` itself (with the new objects) when nothing changed."""
    consumer = previous.consumer
    pod_reads: dict[str, objectreads.PodRead | None] = {}
    repointed_pods: dict[str, objectreads.PodRead] = {}
    for name, body in pods.items():
        kept = previous.pods.get(name)
        if body is None or not name or not _matches(selector, body):
            if kept is not None:
                pod_reads[name] = None
        elif kept is None or not (kept.body is body or objectreads.same_pod(kept, body)):
            pod_reads[name] = objectreads.read_pod(body)
        elif kept.body is not body:
            repointed_pods[name] = dataclasses.replace(kept, body=body)
    map_reads: dict[str, objectreads.MapRead | None] = {}
    repointed_maps: dict[str, objectreads.MapRead] = {}
    for name, body in configmaps.items():
        kept_map = previous.maps.get(name)
        read = None
        if body is not None and name:
            if kept_map is not None and (
                kept_map.body is body or objectreads.same_map(kept_map, body)
            ):
                if kept_map.body is not body:
                    repointed_maps[name] = dataclasses.replace(kept_map, body=body)
                continue
            read = objectreads.read_map(body)
        if read is not None and _ours(read, consumer):
            map_reads[name] = read
        elif kept_map is not None:
            map_reads[name] = None
    if not (pod_reads or map_reads):
        if not (repointed_pods or repointed_maps):
            return previous
        # The same fleet (its serial too), with the bodies as given this time.
        return dataclasses.replace(
            previous,
            pods={**previous.pods, **repointed_pods},
            maps={**previous.maps, **repointed_maps},
        )
    return _apply(previous, pod_reads, map_reads, repointed_pods, repointed_maps)


def _apply(
    previous: Fleet,
    pod_reads: Mapping[str, objectreads.PodRead | None],
    map_reads: Mapping[str, objectreads.MapRead | None],
    repointed_pods: Mapping[str, objectreads.PodRead],
    repointed_maps: Mapping[str, objectreads.MapRead],
) -> Fleet:
    consumer = previous.consumer
    pods = {**previous.pods, **repointed_pods}
    states = dict(previous.states)
    canon = dict(previous.canon)
    label_sets = dict(previous.label_sets)
    notready = set(previous.notready)
    ready = previous.ready
    for name, read in pod_reads.items():
        old = pods.pop(name, None)
        states.pop(name, None)
        if old is not None:
            key = frozenset(old.labels.items())
            label_sets[key] -= 1
            if not label_sets[key]:
                del label_sets[key]
            ready -= old.state.state == "ready"
            notready.discard(name)
            del canon[_canonical(consumer=consumer, pod=name)]
        if read is not None:
            pods[name], states[name] = read, read.state
            key = frozenset(read.labels.items())
            label_sets[key] = label_sets.get(key, 0) + 1
            ready += read.state.state == "ready"
            if read.state.state == "notready":
                notready.add(name)
            canon[_canonical(consumer=consumer, pod=name)] = name
    maps = {**previous.maps, **repointed_maps}
    stored = dict(previous.stored)
    by_pod = dict(previous.by_pod)
    # The pods whose current ConfigMap may differ: changed, or named by a changed ConfigMap.
    recheck = set(pod_reads)
    for name, map_read in map_reads.items():
        old_map = maps.pop(name, None)
        stored.pop(name, None)
        if old_map is not None:
            pod = old_map.stored.pod
            recheck.add(pod)
            left = tuple(n for n in by_pod.get(pod, ()) if n != name)
            if left:
                by_pod[pod] = left
            else:
                by_pod.pop(pod, None)
        if map_read is not None:
            maps[name], stored[name] = map_read, map_read.stored
            pod = map_read.stored.pod
            recheck.add(pod)
            own = list(by_pod.get(pod, ()))
            at = bisect.bisect_left([models.name_key(n) for n in own], models.name_key(name))
            own.insert(at, name)
            by_pod[pod] = tuple(own)
    current = dict(previous.current)
    reporting = set(previous.reporting)
    changed_current: set[str] = set()
    for pod in recheck:
        cm = _current(pod, states=states, stored=stored, by_pod=by_pod, consumer=consumer)
        before = current.pop(pod, None)
        reporting.discard(pod)
        if cm is not None:
            current[pod] = cm
            if cm.annotations.get(partitionreports.ANNOTATION):
                reporting.add(pod)
        if cm is not before:
            changed_current.add(pod)
    names, name_keys = _insort(previous.names, previous.name_keys, pod_reads, lambda n, _r: n)
    members, member_keys = _insort(
        previous.members, previous.member_keys, pod_reads, lambda _n, r: r.member
    )
    return Fleet(
        scope=previous.scope,
        consumer=consumer,
        pods=pods,
        states=states,
        names=names,
        name_keys=name_keys,
        maps=maps,
        stored=stored,
        by_pod=by_pod,
        canon=canon,
        current=current,
        reporting=frozenset(reporting),
        members=members,
        member_keys=member_keys,
        ready=ready,
        notready=frozenset(notready),
        label_sets=label_sets,
        parent=previous.serial if previous.pods or previous.maps else None,
        changed_pods=frozenset(pod_reads),
        changed_maps=frozenset(map_reads),
        changed_current=frozenset(changed_current),
    )


def _current(
    pod: str,
    *,
    states: Mapping[str, podstates.PodState],
    stored: Mapping[str, observations.StoredMap],
    by_pod: Mapping[str, tuple[str, ...]],
    consumer: str,
) -> observations.StoredMap | None:
    """The pod's current ConfigMap (`Fleet.current`); None: it has none, or is gone."""
    state = states.get(pod)
    if state is None or state.state is None:
        return None
    own = _canonical(consumer=consumer, pod=pod)
    named = by_pod.get(pod, ())
    for name in (own, *named) if own in named else named:
        cm = stored[name]
        if not cm.pod_uid or cm.pod_uid == state.uid:
            return cm
    return None


def _insort(
    items: tuple[T, ...],
    keys: Keys,
    changes: Mapping[str, objectreads.PodRead | None],
    item_of: Callable[[str, objectreads.PodRead], T | None],
) -> tuple[tuple[T, ...], Keys]:
    """``items`` (sorted by ``keys``, one per pod name) with each changed pod's item taken out
    and its new one (``item_of(name, read)``, None: none) put in at its key."""
    if not changes:
        return items, keys
    listed, at_keys = list(items), list(keys)
    for name, read in changes.items():
        key = models.name_key(name)
        at = bisect.bisect_left(at_keys, key)
        if at < len(at_keys) and at_keys[at] == key:
            del listed[at], at_keys[at]
        item = item_of(name, read) if read is not None else None
        if item is not None:
            listed.insert(at, item)
            at_keys.insert(at, key)
    return tuple(listed), tuple(at_keys)
