"""Each consumer's roster (its CR, its pods and its ConfigMaps, each kind a `shelves.Shelf`),
and which rosters a watched object may concern.

A roster is what one consumer's cycles read. Besides its shelves it keeps the echoes it waits
for: each write's (uid, version) until the watch delivers that version or a newer one. An
echo that does not come within `ECHO_SECONDS` means the watch lags or stalled, and the
consumer is read afresh (``stale``). It also says which pods it saw leave that its record or
ConfigMaps still name (`Roster.departed`), for the decision to take them for gone, and which
ConfigMaps it saw deleted (`Roster.vanished`), for the decision to confirm their pods.

An object is offered only to the rosters it may concern (`Rosters.candidates`): those whose
selector's lookup key (`shelves.pod_lookup`) or consumer label the object carries, and those
that already hold its name. So a pod or ConfigMap event costs what it concerns, not one check
per consumer, and a fresh listing of a whole namespace (`Rosters.relisted`) is routed the
same way. What a roster's pods and ConfigMaps hold changes through `Rosters` (`Rosters.offer`,
`Rosters.resync`), which keeps the index of who holds each name: the two live in one module.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers.cache import shelves
from eventhub_balancer.handlers.cache.shelves import CONFIGMAPS, CONSUMER, PODS, Body

#: How long the watch may take to deliver one of the operator's own writes before the
#: consumer is read afresh: a healthy watch delivers within a second.
ECHO_SECONDS = 5.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Echo:
    """A write of the operator's that the watch has not delivered yet."""

    uid: str
    version: int | None  # None: a deletion
    since: float


def pod_shelf(selects: Callable[[Body], bool]) -> shelves.Shelf:
    """A roster's pods: those its selector selects, each kept with what the operator reads of
    a pod (`shelves.kept_pod`), and the names seen leaving."""
    return shelves.Shelf(selects, departures=True, keep=shelves.kept_pod)


class Roster:
    """What one consumer's cycles read: its CR, pods and ConfigMaps, and the echoes due.

    ``version`` goes up whenever what the roster serves changes: the cycle compares it to
    tell that nothing it reads changed (`cycles`). ``stale`` holds the kinds to read afresh
    from the API server before they are served again (after a re-list, a missing echo, or a
    conflict that showed a read was stale)."""

    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        selects: Callable[[Body], bool],
        labelled: Callable[[Body], bool],
        scope: Any,
    ) -> None:
        self.namespace = namespace
        self.name = name
        #: what the pods were selected by (`shelves.pod_scope`): another one starts afresh
        self.scope = scope
        self.shelves = {
            CONSUMER: shelves.Shelf(lambda b: str(shelves.meta(b).get("name") or "") == name),
            PODS: pod_shelf(selects),
            CONFIGMAPS: shelves.Shelf(labelled, departures=True),
        }
        self.version = 0
        #: the pod index key its selector looks up (`shelves.pod_lookup`; `Rosters`)
        self.lookup: Any = None
        self.stale: set[str] = set()
        self.echoes: dict[tuple[str, str], Echo] = {}

    @property
    def consumer(self) -> Body | None:
        return self.shelves[CONSUMER].items.get(self.name)

    def items(self, kind: str) -> list[Body]:
        return list(self.shelves[kind].items.values())

    def holds(self, kind: str, name: str) -> bool:
        return name in self.shelves[kind].items

    def departed(self) -> frozenset[str]:
        """The pods seen leaving that the record or a ConfigMap still names: a decision takes
        them for gone. The others are forgotten here: nothing asks about them any more."""
        departed = self.shelves[PODS].departed
        if not departed:
            return frozenset()
        named: set[str] = set()
        status = (self.consumer or {}).get("status") or {}
        for entry in status.get("assignment") or ():
            if isinstance(entry, Mapping):
                named.add(str(entry.get("pod") or ""))
        for cm in self.shelves[CONFIGMAPS].items.values():
            meta = shelves.meta(cm)
            named.add(str((cm.get("data") or {}).get(configmaps.KEY_POD) or ""))
            named.add(str((meta.get("labels") or {}).get(configmaps.LABEL_POD) or ""))
        for name in [n for n in departed if n not in named]:
            del departed[name]
        return frozenset(departed)

    def vanished(self) -> Mapping[str, int | None]:
        """The ConfigMaps seen deleted, by name, each with the version of its deletion. A
        pod's ConfigMap goes with the pod (its owner), so a vanished one may be the only sign
        of a pod the pod watch has not shown leaving yet (`readbacks.unconfirmed`). Those no
        later than the last fresh listing of the pods are forgotten here: it confirmed their
        pods, or showed them gone."""
        vanished = self.shelves[CONFIGMAPS].departed
        listed = self.shelves[PODS].listed
        settled = [n for n, at in vanished.items() if at is None or (listed or 0) >= at]
        for name in settled:
            del vanished[name]
        return dict(vanished)

    @contextlib.contextmanager
    def asking(self, kind: str) -> Iterator[None]:
        """Around a request whose answer enters the shelf of ``kind`` (a fresh read, a write):
        the names removed meanwhile stay removed when the answer is older
        (`shelves.Shelf.passed`)."""
        shelf = self.shelves[kind]
        shelf.pending += 1
        try:
            yield
        finally:
            shelf.pending -= 1
            if not shelf.pending:
                shelf.passed(shelf.watermark)

    def offer(self, kind: str, body: Body, *, deleted: bool = False, echo: bool = False) -> bool:
        """A body from the watch (``echo``: it may be the echo of a write), a write or a read;
        whether the roster changed."""
        if echo:
            self._echoed(kind, body, deleted=deleted)
        changed = self.shelves[kind].offer(body, deleted=deleted, watched=echo)
        self.version += changed
        return changed

    def wrote(self, kind: str, body: Body, *, now: float) -> bool:
        """The response of the operator's own write: served at once, its echo awaited, unless
        the watch already delivered that version: a write that changed nothing (such as the
        status a decision writes first, as its precondition) keeps the object's version, and
        no event follows it; and a stream is in order, so an event at or past it came."""
        uid = str(shelves.meta(body).get("uid") or "")
        version = shelves.version(body)
        if uid and shelves.newer(version, self.shelves[kind].watermark):
            self.echoes[kind, uid] = Echo(uid=uid, version=version, since=now)
        return self.offer(kind, body)

    def deleted(self, kind: str, *, name: str, uid: str, now: float) -> bool:
        """The operator deleted ``name`` (of ``uid``): gone at once, its DELETED awaited."""
        if uid:
            self.echoes[kind, uid] = Echo(uid=uid, version=None, since=now)
        changed = self.shelves[kind].remove(name, at=None, uid=uid)
        self.version += changed
        return changed

    def resync(
        self,
        kind: str,
        listed: Iterable[Body],
        *,
        at: int | None,
        present: set[str] | None = None,
    ) -> bool:
        """A fresh listing of the kind's scope at version ``at`` (`shelves.Shelf.resync`)."""
        listed = list(listed)
        self._confirmed(
            kind, {shelves.uid(b): shelves.version(b) for b in listed if shelves.kept_on(b)}
        )
        self.stale.discard(kind)
        changed = self.shelves[kind].resync(listed, at=at, present=present)
        self.version += changed
        return changed

    def fresh(self, kind: str, body: Body) -> bool:
        """One object read afresh from the API server (the CR after a conflict)."""
        meta = shelves.meta(body)
        uid = str(meta.get("uid") or "")
        echo = self.echoes.get((kind, uid))
        if echo is not None and (
            echo.version is None or not shelves.newer(echo.version, shelves.version(body))
        ):
            del self.echoes[kind, uid]
        self.stale.discard(kind)
        return self.offer(kind, body)

    def _confirmed(self, kind: str, listed: Mapping[str, int | None]) -> None:
        """Echoes a fresh listing settles: what it shows at that version or later, and the
        deletions (or objects) it no longer has, need no echo from the watch to be known (one
        held, deleted, by someone else's finalizer counts as no longer had: `shelves.kept_on`)."""
        for key, echo in list(self.echoes.items()):
            if key[0] != kind:
                continue
            shown = echo.uid in listed
            if not shown or (
                echo.version is not None and not shelves.newer(echo.version, listed[echo.uid])
            ):
                del self.echoes[key]

    def overdue(self, *, now: float) -> set[str]:
        """The kinds whose echoes are later than `ECHO_SECONDS`: their watch is stale. Each
        such echo waits anew, so a watch that stays stale costs one fresh read per bound."""
        kinds: set[str] = set()
        for key, echo in list(self.echoes.items()):
            if now - echo.since > ECHO_SECONDS:
                kinds.add(key[0])
                self.echoes[key] = dataclasses.replace(echo, since=now)
        return kinds

    def _echoed(self, kind: str, body: Body, *, deleted: bool) -> None:
        echo = self.echoes.get((kind, shelves.uid(body)))
        if echo is None:
            return
        if echo.version is None:  # a deletion: settled by one held by a finalizer, too
            deleted = deleted or not shelves.kept_on(body)
        if deleted or not shelves.newer(echo.version, shelves.version(body)):
            del self.echoes[kind, echo.uid]


class Rosters:
    """Every running consumer's roster, and which of them an object may concern: by its
    selector's lookup key (`Roster.lookup`), its consumer label, or a name it holds."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Roster] = {}
        #: (namespace, `shelves.pod_scope` its selector) -> the roster it selects pods for
        self.by_scope: dict[tuple[str, Any], Roster] = {}
        #: a pod index key (`shelves.pod_keys`) -> the rosters whose selector looks it up
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
        roster.shelves[PODS] = pod_shelf(selects)
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
        """`Roster.offer`, keeping track of who holds the name."""
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
        asked: Mapping[tuple[str, str], shelves.Shelf],
    ) -> list[tuple[str, str]]:
        """A fresh listing of ``kind`` in the whole of ``namespace``, answered at ``at``: each
        roster it was asked for takes the bodies it holds or selects (``keys``: a body's pod
        index keys) and loses what the listing lacks and is no newer; the rosters that changed.

        ``asked``: the rosters of the namespace when the listing was asked, each with its shelf
        of ``kind`` then. A roster added since (a daemon started or restarted), or whose shelf
        was replaced (another selector), filled from kopf's index meanwhile; the listing's
        selector may not cover its pods, and its shelf was not waiting for the answer."""
        listed = list(listed)
        present = {str(shelves.meta(b).get("name") or "") for b in listed}
        routed: dict[tuple[str, str], list[Body]] = {
            key: []
            for key, roster in self.by_key.items()
            if key[0] == namespace and roster.shelves[kind] is asked.get(key)
        }
        for body in listed:
            for roster in self.candidates(kind, namespace, body, keys=keys(body)):
                if (roster.namespace, roster.name) in routed:
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
