"""What the ConfigMaps got wrong: their own problems and what they claim beyond the record.

A ConfigMap's ``data`` is the operator's output, compared with its record, never believed
(`readbacks`): a ConfigMap that claims a partition the record does not give its pod (or at
another epoch) is tampered with, and is put back and reported. Checking every ConfigMap's
partitions against the record in every cycle made a cycle's cost grow with the fleet, so the
last decision's findings are kept per consumer (`Kept`) and a decision over the next fleet
(`fleets.Fleet.parent`) checks again only:

- the ConfigMaps that changed, appeared or went (`fleets.Fleet.changed_maps`);
- the ConfigMaps that name a partition whose record entry or ``status.epochs`` value changed
  (found by one pass over the partitions, the planner's size, and an index of which
  ConfigMaps name which partition).

A record entry that did not change is the same object cycle after cycle (`readbacks.ENTRIES`
reads each entry once per content), so the pass compares identities. Anything else (the first
decision, a fleet that is not the next one) checks every ConfigMap; either way the findings
are those of `find` over every ConfigMap, which `tests/reconciling/test_claims.py` holds it to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.reconciling import fleets, memos, observations

if TYPE_CHECKING:
    from eventhub_balancer.reconciling.readbacks import Recorded

Record = Mapping[models.PartitionId, "Recorded"]


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
    still says ``owned``) or behind it (an older epoch than the record's, not yet rewritten).
    Anything else is someone else's doing.
    """
    claims = [
        f"data key {k[:40]!r} is not the operator's"
        for k in cm.data
        if k not in configmaps.DATA_KEYS
    ]
    claims += [f"data: {p}" for p in cm.parsed.problems if "partition" in p]
    for pid, entry in cm.parsed.partitions.items():
        mine = recorded.get(pid)
        same = mine is not None and mine.pod == cm.pod and mine.epoch == entry.epoch
        if same and mine is not None and entry.state in (mine.state, "revoking"):
            continue  # as recorded, or revoking ahead of the record (an interrupted cycle)
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


def find(
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Kept:
    """One consumer's findings as its last decision made them, and their inputs."""

    fleet: int
    maps: Mapping[str, observations.StoredMap]
    recorded: Record
    status_epochs: Mapping[str, Any]
    #: partition -> the names of the ConfigMaps whose data names it
    claimants: Mapping[str, frozenset[str]]
    #: the ConfigMaps with problems of their own, and what each claims beyond the record
    flagged: Mapping[str, observations.StoredMap]
    claims: Mapping[str, tuple[str, ...]]


#: Each consumer's findings as its last decision made them.
_KEPT: memos.Latest[Kept] = memos.Latest()


def forget() -> None:
    """Every consumer's findings dropped: the next decision checks every ConfigMap."""
    _KEPT.clear()


def follow(fleet: fleets.Fleet, recorded: Record, status_epochs: Mapping[str, Any]) -> Found:
    """`find` over the fleet's ConfigMaps, checking again only what changed since the last
    decision over the fleet it was advanced from."""
    kept = _KEPT.get(fleet.scope)
    stored = fleet.stored
    if kept is None or kept.fleet not in (fleet.serial, fleet.parent):
        claimants: dict[str, frozenset[str]] = {}
        for cm in stored.values():
            for pid in cm.parsed.partitions:
                claimants[pid] = claimants.get(pid, frozenset()) | {cm.name}
        flagged = {name: cm for name, cm in stored.items() if cm.parsed.problems}
        claims = {}
        for name, cm in stored.items():
            if found := beyond_record(cm, recorded, status_epochs):
                claims[name] = found
    else:
        claimants = dict(kept.claimants)
        flagged, claims = dict(kept.flagged), dict(kept.claims)
        recheck: set[str] = set()
        for name in fleet.changed_maps if fleet.serial != kept.fleet else ():
            flagged.pop(name, None)
            claims.pop(name, None)
            old, new = kept.maps.get(name), stored.get(name)
            for pid in old.parsed.partitions if old is not None else ():
                left = claimants[pid] - {name}
                if left:
                    claimants[pid] = left
                else:
                    del claimants[pid]
            if new is not None:
                for pid in new.parsed.partitions:
                    claimants[pid] = claimants.get(pid, frozenset()) | {name}
                if new.parsed.problems:
                    flagged[name] = new
                recheck.add(name)
        for pid in _changed(kept.recorded, recorded, identity=True) | _changed(
            kept.status_epochs, status_epochs, identity=False
        ):
            recheck.update(claimants.get(pid, ()))
        for name in recheck:
            claims.pop(name, None)
            if found := beyond_record(stored[name], recorded, status_epochs):
                claims[name] = found
    _KEPT.put(
        fleet.scope,
        Kept(
            fleet=fleet.serial,
            maps=stored,
            recorded=recorded,
            status_epochs=status_epochs,
            claimants=claimants,
            flagged=flagged,
            claims=claims,
        ),
    )
    return _found(flagged, claims)


def _changed(before: Mapping[Any, Any], after: Mapping[Any, Any], *, identity: bool) -> set[Any]:
    """The keys whose value differs, by identity or by equality (as `beyond_record` compares
    epochs)."""
    if before is after:
        return set()
    changed = set(before.keys() ^ after.keys())
    for key, value in after.items():
        old = before.get(key, changed)
        if identity:
            if old is not value:
                changed.add(key)
        elif old != value:
            changed.add(key)
    return changed
