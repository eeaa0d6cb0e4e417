"""Every running consumer's roster, and which of them an object may concern.

An event is offered only to the rosters it may concern (`Rosters.candidates`): those whose
selector's lookup key (`indexkeys.pod_lookup`) or consumer label the object carries, and
those that already hold its name. So a pod or ConfigMap event costs what it concerns, not one
check per consumer, and a fresh listing of a whole namespace (`Rosters.relisted`) is routed
the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers.cache import shelves
from eventhub_balancer.handlers.cache.rosters import Roster
from eventhub_balancer.handlers.cache.shelves import CONFIGMAPS, CONSUMER, PODS, Body


class Rosters:
    """Every running consumer's roster, and which of them an object may concern.

    An event is offered only to the rosters it may concern: those whose selector's lookup key
    (`rosters.Roster.lookup`) or consumer label the object carries, and those that already hold its
    name. So a pod or ConfigMap event costs what it concerns, not one check per consumer."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Roster] = {}
        #: (namespace, the selector's query) -> the roster it selects pods for
        self.by_scope: dict[tuple[str, Any], Roster] = {}
        #: a pod index key (`indexkeys.pod_keys`) -> the rosters whose selector looks it up
        self._selecting: dict[Any, set[tuple[str, str]]] = {}
        #: (namespace, consumer label) -> the roster whose ConfigMaps carry it
        self._labelled: dict[tuple[str, str], tuple[str, str]] = {}
        #: (kind, namespace, name) -> the rosters that hold it
        self._holders: dict[tuple[str, str, str], set[tuple[str, str]]] = {}

    def add(self, roster: Roster, *, lookup: Any, label: str) -> None:
        key = (roster.namespace, roster.name)
        self.by_key[key] = roster
        self.by_scope[roster.namespace, roster.scope] = roster
        self._labelled[roster.namespace, label] = key
        roster.lookup = lookup
        if lookup is not None:
            self._selecting.setdefault(lookup, set()).add(key)

    def rescope(
        self, roster: Roster, *, scope: Any, lookup: Any, selects: Callable[[Body], bool]
    ) -> None:
        """Another selector: the roster's pods start afresh under it."""
        key = (roster.namespace, roster.name)
        if self.by_scope.get((roster.namespace, roster.scope)) is roster:
            del self.by_scope[roster.namespace, roster.scope]
        self._unselect(key, roster.lookup)
        self._release(roster, PODS, set(roster.shelves[PODS].items))
        roster.scope, roster.lookup = scope, lookup
        self.by_scope[roster.namespace, scope] = roster
        if lookup is not None:
            self._selecting.setdefault(lookup, set()).add(key)
        roster.shelves[PODS] = shelves.Shelf(selects, departures=True)
        roster.version += 1

    def remove(self, namespace: str, name: str) -> Roster | None:
        key = (namespace, name)
        roster = self.by_key.pop(key, None)
        if roster is None:
            return None
        if self.by_scope.get((namespace, roster.scope)) is roster:
            del self.by_scope[namespace, roster.scope]
        self._unselect(key, roster.lookup)
        for label, owner in list(self._labelled.items()):
            if owner == key:
                del self._labelled[label]
        for kind in (PODS, CONFIGMAPS):
            self._release(roster, kind, set(roster.shelves[kind].items))
        return roster

    def candidates(
        self, kind: str, namespace: str, body: Body, *, keys: Iterable[Any]
    ) -> list[Roster]:
        """The rosters an object of ``kind`` may concern; ``keys``: its pod index keys."""
        meta = shelves.meta(body)
        found = set(self._holders.get((kind, namespace, str(meta.get("name") or "")), ()))
        if kind == PODS:
            for k in keys:
                found |= self._selecting.get(k, set())
        elif kind == CONFIGMAPS:
            label = str((meta.get("labels") or {}).get(configmaps.LABEL_CONSUMER) or "")
            owner = self._labelled.get((namespace, label)) if label else None
            if owner is not None:
                found.add(owner)
        return [self.by_key[k] for k in found if k in self.by_key]

    def offer(self, roster: Roster, kind: str, body: Body, **how: Any) -> bool:
        """`rosters.Roster.offer`, keeping track of who holds the name."""
        name = str(shelves.meta(body).get("name") or "")
        before = roster.holds(kind, name)
        changed = roster.offer(kind, body, **how)
        self._track(roster, kind, name, before)
        return changed

    def wrote(self, roster: Roster, kind: str, body: Body, *, now: float) -> bool:
        name = str(shelves.meta(body).get("name") or "")
        before = roster.holds(kind, name)
        changed = roster.wrote(kind, body, now=now)
        self._track(roster, kind, name, before)
        return changed

    def deleted(self, roster: Roster, kind: str, *, name: str, uid: str, now: float) -> None:
        before = roster.holds(kind, name)
        roster.deleted(kind, name=name, uid=uid, now=now)
        self._track(roster, kind, name, before)

    def resync(
        self,
        roster: Roster,
        kind: str,
        listed: Iterable[Body],
        *,
        at: int | None,
        present: set[str] | None = None,
    ) -> bool:
        before = set(roster.shelves[kind].items)
        changed = roster.resync(kind, listed, at=at, present=present)
        after = set(roster.shelves[kind].items)
        self._release(roster, kind, before - after)
        for name in after - before:
            self._holders.setdefault((kind, roster.namespace, name), set()).add(
                (roster.namespace, roster.name)
            )
        return changed

    def relisted(
        self,
        namespace: str,
        kind: str,
        listed: Iterable[Body],
        *,
        at: int | None,
        keys: Callable[[Body], Iterable[Any]],
    ) -> list[tuple[str, str]]:
        """A fresh listing of ``kind`` in the whole of ``namespace``, answered at ``at``: each
        roster there takes the bodies it holds or selects (``keys``: a body's pod index keys)
        and loses what the listing lacks and is no newer; the rosters that changed."""
        listed = list(listed)
        present = {str(shelves.meta(b).get("name") or "") for b in listed}
        routed: dict[tuple[str, str], list[Body]] = {
            key: [] for key in self.by_key if key[0] == namespace
        }
        for body in listed:
            for roster in self.candidates(kind, namespace, body, keys=keys(body)):
                routed[roster.namespace, roster.name].append(body)
        return [
            key
            for key, bodies in routed.items()
            if self.resync(self.by_key[key], kind, bodies, at=at, present=present)
        ]

    def _track(self, roster: Roster, kind: str, name: str, before: bool) -> None:
        if kind == CONSUMER or roster.holds(kind, name) == before:
            return
        key = (kind, roster.namespace, name)
        if before:
            self._release(roster, kind, {name})
        else:
            self._holders.setdefault(key, set()).add((roster.namespace, roster.name))

    def _release(self, roster: Roster, kind: str, names: Iterable[str]) -> None:
        for name in names:
            key = (kind, roster.namespace, name)
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard((roster.namespace, roster.name))
                if not holders:
                    del self._holders[key]

    def _unselect(self, key: tuple[str, str], lookup: Any) -> None:
        if lookup is None:
            return
        selecting = self._selecting.get(lookup)
        if selecting is not None:
            selecting.discard(key)
            if not selecting:
                del self._selecting[lookup]
