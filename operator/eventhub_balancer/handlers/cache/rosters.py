"""One roster per consumer: its CR, its pods and its ConfigMaps, each kind a `shelves.Shelf`.

A roster is what one consumer's cycles read. Besides its shelves it keeps the echoes it waits
for: each write's (uid, version) until the watch delivers that version or a newer one. An
echo that does not come within `ECHO_SECONDS` means the watch lags or stalled, and the
consumer is read afresh (``stale``). It also says which pods it saw leave that its record or
ConfigMaps still name (`Roster.departed`), for the decision to take them for gone.
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
        #: what the pods were selected by (the selector's query): another one starts afresh
        self.scope = scope
        self.shelves = {
            CONSUMER: shelves.Shelf(lambda b: str(shelves.meta(b).get("name") or "") == name),
            PODS: shelves.Shelf(selects, departures=True),
            CONFIGMAPS: shelves.Shelf(labelled),
        }
        self.version = 0
        #: the pod index key its selector looks up (`indexkeys.pod_lookup`; `routing.Rosters`)
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
        """The response of the operator's own write: served at once, its echo awaited."""
        meta = shelves.meta(body)
        uid = str(meta.get("uid") or "")
        if uid:
            self.echoes[kind, uid] = Echo(uid=uid, version=shelves.version(body), since=now)
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
            kind, {str(shelves.meta(b).get("uid") or ""): shelves.version(b) for b in listed}
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
        deletions (or objects) it no longer has, need no echo from the watch to be known."""
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
        uid = str(shelves.meta(body).get("uid") or "")
        echo = self.echoes.get((kind, uid))
        if echo is None:
            return
        if deleted or (
            echo.version is not None and not shelves.newer(echo.version, shelves.version(body))
        ):
            del self.echoes[kind, uid]
