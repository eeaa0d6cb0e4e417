"""Change tracking (`ports.WatchPort`): every watch event, offered to the rosters it may
concern; out come the consumers to wake, and a re-list makes every roster read that kind
afresh once.
"""

from __future__ import annotations

import logging

from eventhub_balancer.handlers.cache import indexkeys, seen, shelves
from eventhub_balancer.handlers.cache.indexkeys import CONSUMERS, PODS
from eventhub_balancer.handlers.cache.shelves import Body

logger = logging.getLogger(__name__)

Key = seen.Key


class Tracking:
    """`ports.WatchPort`: every watch event, offered to the rosters it may concern."""

    def __init__(self, shared: seen.Seen) -> None:
        self.seen = shared
        #: per kind, whether its watch is streaming (an event after the listing)
        self._streaming: dict[str, bool] = {}

    def observed(self, kind: str, event_type: str | None) -> bool:
        """An event of the watch of ``kind``. None is a listing; one after watch events is a
        re-list: every roster reads that kind afresh once (what vanished while the watch was
        down gets no DELETED event). Whether a re-list started."""
        relist = event_type is None and bool(self._streaming.get(kind))
        self._streaming[kind] = event_type is not None
        if kind == CONSUMERS:
            self.seen.peers = None  # kopf filed the event in the peers index before this
        if relist:
            logger.info("the watch of %s listed again; each consumer reads it afresh once", kind)
            self.seen.relisted.add(seen.WATCHED[kind])
            for roster in self.seen.rosters.by_key.values():
                roster.stale.add(seen.WATCHED[kind])
        return relist

    def event(self, kind: str, body: Body, event_type: str | None) -> list[Key]:
        """A watch event's body, offered to every roster it may concern (that selects it or
        holds its name, `routing.Rosters.candidates`); the consumers whose roster changed."""
        meta = shelves.meta(body)
        namespace = str(meta.get("namespace") or "")
        deleted = event_type == "DELETED"
        shelf = seen.WATCHED[kind]
        kept = self.seen.rosters
        if kind == CONSUMERS:
            roster = kept.by_key.get((namespace, str(meta.get("name") or "")))
            candidates = [] if roster is None else [roster]
        else:
            keys = indexkeys.pod_keys(namespace, meta.get("labels") or {}) if kind == PODS else ()
            candidates = kept.candidates(shelf, namespace, body, keys=keys)
        return [
            (r.namespace, r.name)
            for r in candidates
            if kept.offer(r, shelf, body, deleted=deleted, echo=True)
        ]
