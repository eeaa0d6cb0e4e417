"""What each pod needs written, kept from one decision to the next and derived again only
for the pods something concerns, pure.

`writes.pod_writes` says what one pod needs (its ConfigMap's name, the write that differs,
its annotation). Deriving it for every pod in every cycle made a cycle's cost grow with the
fleet. The last decision's needs are kept per consumer (`Kept`), with what they were derived
from, and a decision over a fleet advanced from that one (`fleets.Fleet.parent`) derives
again the needs of the pods that:

- changed (their body), or whose ConfigMap changed, appeared or went;
- gained, lost or changed a partition in the assignment (one pass over the partitions, the
  planner's size, not the fleet's);
- have a ConfigMap whose problems (`readbacks.ReadBack.problems`) came or went.

Every other pod needs what it needed: nothing in its inputs changed. A need not carried out
(a write that failed) is kept and asked for again. Anything else (another spec, the first
decision, a fleet that is not the next one) derives every pod's need, as `writes.derive_writes`
does, so that the writes are the same either way; `tests/reconciling/test_needs.py` holds it
to that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.reconciling import fleets, memos, observations, writes

Entries = Mapping[models.PartitionId, tuple[str, configmaps.PartitionEntry]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kept:
    """One consumer's needs as its last decision derived them, and their inputs."""

    fleet: int
    spec: specs.ConsumerSpec
    annotate_pods: bool
    #: partition -> (owner, entry) of the assignment written for
    entries: Entries
    #: the fleet's ConfigMaps
    maps: Mapping[str, observations.StoredMap]
    problems: frozenset[str]
    needs: Mapping[str, writes.PodWrites]
    #: the pods whose need writes something
    pending: frozenset[str]
    #: how many pods want each ConfigMap name; the ConfigMaps nobody wants
    wanted: Mapping[str, int]
    unwanted: frozenset[str]


#: Each consumer's needs as its last decision derived them.
_KEPT: memos.Latest[Kept] = memos.Latest()


def forget() -> None:
    """Every consumer's needs dropped: the next decision derives them all."""
    _KEPT.clear()


def derive(
    *,
    fleet: fleets.Fleet,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    assignment: Mapping[models.PartitionId, models.Ownership],
    problems: Mapping[str, tuple[str, ...]],
    annotate_pods: bool,
) -> writes.Writes:
    """The writes of ``assignment`` over ``fleet`` (`writes.derive_writes`), deriving again
    only the needs of the pods something concerns."""
    scope = fleet.scope
    entries: dict[models.PartitionId, tuple[str, configmaps.PartitionEntry]] = {}
    owners: dict[str, dict[models.PartitionId, configmaps.PartitionEntry]] = {}
    for pid, o in assignment.items():
        if o.owner is not None:
            entry = writes.entry(o.epoch, o.state, o.since)
            entries[pid] = (o.owner, entry)
            owners.setdefault(o.owner, {})[pid] = entry
    with writes.SPECS.round(scope) as last_spec:
        spec = last_spec.get(consumer, fits=spec.__eq__, compute=lambda: spec)
    kept = _KEPT.get(scope)
    if (
        kept is None
        or kept.spec is not spec
        or kept.annotate_pods != annotate_pods
        or kept.fleet not in (fleet.serial, fleet.parent)
    ):
        kept = None
    problem_names = frozenset(problems)
    if kept is None:
        concerned: Iterable[str] = fleet.states
        needs: dict[str, writes.PodWrites] = {}
        pending: set[str] = set()
        wanted: dict[str, int] = {}
        candidates: set[str] = set(fleet.stored)
    else:
        concerned = _concerned(kept, fleet, entries, problem_names)
        needs, pending, wanted = dict(kept.needs), set(kept.pending), dict(kept.wanted)
        candidates = set(fleet.changed_maps) if fleet.serial != kept.fleet else set()
    by_name = fleet.stored
    with writes.BUILT.round(scope, partial=kept is not None) as built:
        for name in concerned:
            old = needs.pop(name, None)
            if old is not None and old.wanted is not None:
                candidates.add(old.wanted)
                wanted[old.wanted] -= 1
            pending.discard(name)
            pod = fleet.states.get(name)
            if pod is None:
                built.drop(name)
                continue
            cm = writes.map_of(name, consumer=consumer, by_name=by_name, by_pod=fleet.by_pod)
            need = writes.pod_writes(
                pod,
                spec=spec,
                consumer=consumer,
                namespace=namespace,
                partitions=owners.get(name, {}),
                cm=cm,
                annotations=fleet.pods[name].annotations,
                problem=cm is not None and cm.name in problem_names,
                annotate_pods=annotate_pods,
                built=built,
            )
            needs[name] = need
            if need.wanted is not None:
                candidates.add(need.wanted)
                wanted[need.wanted] = wanted.get(need.wanted, 0) + 1
            if need.map is not None or need.annotation is not None:
                pending.add(name)
    unwanted = set(kept.unwanted) if kept is not None else set()
    for name in candidates:
        if name in by_name and not wanted.get(name):
            unwanted.add(name)
        else:
            unwanted.discard(name)
            if not wanted.get(name):
                wanted.pop(name, None)
    _KEPT.put(
        scope,
        Kept(
            fleet=fleet.serial,
            spec=spec,
            annotate_pods=annotate_pods,
            entries=entries,
            maps=by_name,
            problems=problem_names,
            needs=needs,
            pending=frozenset(pending),
            wanted=wanted,
            unwanted=frozenset(unwanted),
        ),
    )
    return writes.assemble([needs[n] for n in pending], [by_name[n] for n in unwanted])


def _concerned(
    kept: Kept,
    fleet: fleets.Fleet,
    entries: Entries,
    problems: frozenset[str],
) -> set[str]:
    """The pods whose need may differ from the kept one."""
    concerned: set[str] = set()
    if fleet.serial != kept.fleet:
        concerned.update(fleet.changed_pods)
        for name in fleet.changed_maps:
            # The pod it was and is for, and the pod whose own name it has (`writes.map_of`).
            for cm in (kept.maps.get(name), fleet.stored.get(name)):
                if cm is not None:
                    concerned.add(cm.pod)
            if name in fleet.canon:
                concerned.add(fleet.canon[name])
    kept_entries = kept.entries
    for pid, (owner, entry) in entries.items():
        before = kept_entries.get(pid)
        if before is None:
            concerned.add(owner)
        elif before[1] is not entry or before[0] != owner:
            concerned.update((owner, before[0]))
    if len(kept_entries) != len(entries) or kept_entries.keys() != entries.keys():
        concerned.update(kept_entries[pid][0] for pid in kept_entries.keys() - entries.keys())
    for name in problems ^ kept.problems:
        for cm in (kept.maps.get(name), fleet.stored.get(name)):
            if cm is not None:
                concerned.add(cm.pod)
    return concerned
