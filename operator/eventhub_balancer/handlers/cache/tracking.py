"""What the watches feed in and what each consumer follows: every watch event offered to the
rosters it may concern (`Tracking`, `ports.WatchPort`), and each running consumer's roster,
started and kept by its daemon (`Following`, `ports.RosterPort`).

Out of an event come the consumers to wake, and a re-list makes every roster read that kind
afresh once. kopf's indexes (`kopf.index`, registered in `kopfwiring`) are only where a roster
starts: kopf starts no daemon before every index holds its first listing, and a consumer's
daemon fills its roster from them (`Following.follow`), synchronously, so no event falls
between the two. Both sides act on the same rosters in one `seen.Seen`, and each marks what
must be read afresh: a re-list (`Tracking.observed`, or a name listed twice:
`Tracking.event`), a roster's start (its ConfigMaps: `Following.follow`), a missing echo
(`Following.follow`), a conflict (`Following.refresh`).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers.cache import rosters, seen, shelves
from eventhub_balancer.handlers.cache.shelves import CONFIGMAPS, CONSUMERS, PODS, Body

logger = logging.getLogger(__name__)

Key = seen.Key
Index = seen.Index

#: The shortest time between two warnings that a kind's watch lags: a watch lags for every
#: consumer at once, and each of them notices it on its own.
LAG_WARNING_SECONDS = 60.0


class LagWarnings:
    """One warning for a watch that lags, not one per consumer that notices it: at most one
    per kind and `LAG_WARNING_SECONDS`, each counting the consumers read afresh since the
    last (each one is logged at DEBUG)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        #: kind -> when its last warning was logged
        self.warned: dict[str, float] = {}
        #: kind -> the consumers read afresh since its last warning
        self.unreported: dict[str, int] = {}

    def noticed(self, key: Key, kinds: Iterable[str]) -> None:
        """The consumer ``key`` found the watches of ``kinds`` late with its own writes."""
        for kind in sorted(kinds):
            logger.debug(
                "%s/%s: the watch of %s did not deliver the operator's own write within %.0f s",
                *key,
                kind,
                rosters.ECHO_SECONDS,
            )
            self.unreported[kind] = self.unreported.get(kind, 0) + 1
        self.report()

    def report(self) -> None:
        """Log what is due: each kind noticed late whose last warning is old enough."""
        now = self.clock()
        for kind, count in sorted(self.unreported.items()):
            last = self.warned.get(kind)
            if last is not None and now - last < LAG_WARNING_SECONDS:
                continue
            del self.unreported[kind]
            self.warned[kind] = now
            logger.warning(
                "the watch of %s did not deliver the operator's own writes within %.0f s: "
                "%d consumer%s read afresh%s (a watch that lags is warned of at most once "
                "a minute)",
                kind,
                rosters.ECHO_SECONDS,
                count,
                "" if count == 1 else "s",
                "" if last is None else f" in the last {now - last:.0f} s",
            )


class Tracking:
    """`ports.WatchPort`: every watch event, offered to the rosters it may concern."""

    def __init__(self, shared: seen.Seen) -> None:
        self.seen = shared
        #: per kind, whether its watch is streaming (an event after the listing)
        self._streaming: dict[str, bool] = {}
        #: per kind, the (namespace, name) of each listing event since the watch last
        #: streamed or listed again: a second listing event of one name is a re-list too
        self._listed: dict[str, set[tuple[str, str]]] = {}
        #: per kind, the re-lists seen since the start (what `ehb bench operator` waits for)
        self.relists: collections.Counter[str] = collections.Counter()

    def observed(self, kind: str, event_type: str | None) -> bool:
        """An event of the watch of ``kind``. None is a listing; one after watch events is a
        re-list: every roster reads that kind afresh once (what vanished while the watch was
        down gets no DELETED event). Whether a re-list started. A watch that streamed nothing
        since its last listing tells its re-list by a name listed twice (`event`)."""
        relist = event_type is None and bool(self._streaming.get(kind))
        self._streaming[kind] = event_type is not None
        if event_type is not None:
            self._listed.pop(kind, None)
        if kind == CONSUMERS:
            self.seen.peers = None  # kopf filed the event in the peers index before this
        if relist:
            self._relisted(kind)
        return relist

    def _relisted(self, kind: str) -> None:
        """kopf lists ``kind`` again: every roster reads it afresh once, and so does every
        roster started from now on (kopf's index may hold what vanished meanwhile)."""
        logger.info("the watch of %s listed again; each consumer reads it afresh once", kind)
        self.relists[kind] += 1
        self._listed[kind] = set()
        self.seen.relisted.add(seen.WATCHED[kind])
        for roster in self.seen.rosters.by_key.values():
            roster.stale.add(seen.WATCHED[kind])

    def event(self, kind: str, body: Body, event_type: str | None) -> list[Key]:
        """A watch event's body, offered to every roster it may concern (that selects it or
        holds its name, `rosters.Rosters.candidates`); the consumers whose roster changed,
        and every consumer when a listing event names an object already listed: kopf lists
        the kind again without a watch event between (a quiet watch answered 410, a replica
        resumed that paused right after its start), which `observed` cannot tell."""
        meta = shelves.meta(body)
        namespace = str(meta.get("namespace") or "")
        deleted = event_type == "DELETED"
        shelf = seen.WATCHED[kind]
        kept = self.seen.rosters
        again = False
        if event_type is None:
            named = (namespace, str(meta.get("name") or ""))
            again = named in self._listed.get(kind, ())
            if again:
                self._relisted(kind)
            self._listed.setdefault(kind, set()).add(named)
        if kind == CONSUMERS:
            roster = kept.by_key.get((namespace, str(meta.get("name") or "")))
            candidates = [] if roster is None else [roster]
        else:
            keys = shelves.pod_keys(namespace, meta.get("labels") or {}) if kind == PODS else ()
            candidates = kept.candidates(shelf, namespace, body, keys=keys)
        changed = [
            (r.namespace, r.name)
            for r in candidates
            if kept.offer(r, shelf, body, deleted=deleted, echo=True)
        ]
        return list(kept.by_key) if again else changed


class Following:
    """`ports.RosterPort`: one roster per running consumer, started and kept by its daemon."""

    def __init__(self, shared: seen.Seen, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seen = shared
        self.clock = clock
        self.lag_warnings = LagWarnings(clock)

    def attach(self, indexes: Mapping[str, Index]) -> None:
        """The indexes rosters start from (called by each daemon at start)."""
        self.seen.indexes = dict(indexes)
        self.seen.peers = None

    def follow(self, *, namespace: str, name: str, selector: specs.Selector | None) -> None:
        """Keep the consumer's roster for ``selector``: start it (from kopf's indexes) on the
        first call and when the selector changes, and mark what must be read afresh because
        the watch did not echo a write in time. Called by the daemon before each cycle."""
        kept = self.seen.rosters
        roster = kept.by_key.get((namespace, name))
        # The consumer's own selector finds its pods in the index (a superset); the one scoped
        # to what the operator watches keeps them.
        lookup = shelves.pod_lookup(namespace, selector) if selector is not None else None
        scoped = selector.both(self.seen.pod_scope) if selector is not None else None
        scope = shelves.pod_scope(selector, self.seen.pod_scope) if selector is not None else None
        if roster is None:
            roster = rosters.Roster(
                namespace=namespace,
                name=name,
                selects=seen.selects(scoped),
                labelled=seen.labelled(name),
                scope=scope,
            )
            kept.add(roster, lookup=lookup, label=configmaps.label_value(name))
            self._fill(roster, shelves.CONSUMER, self._indexed_consumer(namespace, name))
            self._fill(roster, shelves.CONFIGMAPS, self._indexed_configmaps(namespace, name))
            self._fill(roster, shelves.PODS, self._indexed_pods(namespace, selector))
            # kopf's index may hold ConfigMaps deleted while the watch was away, and a re-list
            # with no event at all (an empty listing) is not seen: the roster would serve a
            # pod's ConfigMap that is gone, a steady cycle would write nothing, and the pod
            # would run no partition for good. Its first cycle lists them once (one LIST per
            # daemon start); the pods are listed afresh every `relisting.RELIST_SECONDS`.
            roster.stale.add(shelves.CONFIGMAPS)
        elif roster.scope != scope:
            # Another selector: the pods start afresh; the CR and ConfigMaps carry on.
            kept.rescope(roster, scope=scope, lookup=lookup, selects=seen.selects(scoped))
            self._fill(roster, shelves.PODS, self._indexed_pods(namespace, selector))
        overdue = roster.overdue(now=self.clock())
        if overdue:
            self.lag_warnings.noticed((namespace, name), overdue)
            # A watch cache that lags behind one kind's writes lags behind the pods too, and
            # the operator never writes pods: they are read afresh with what was missed.
            roster.stale |= overdue | {shelves.PODS}
        elif self.lag_warnings.unreported:
            self.lag_warnings.report()  # what was held back, once its minute is over

    def _fill(self, roster: rosters.Roster, kind: str, bodies: Iterable[Body] | None) -> None:
        """A new shelf from what the index holds; without indexes, or when the index may hold
        what a re-list no longer had, it is also read afresh at first use."""
        if bodies is None or kind in self.seen.relisted:
            roster.stale.add(kind)
        if bodies is None:
            return
        for body in bodies:
            self.seen.rosters.offer(roster, kind, body)

    def _indexed_consumer(self, namespace: str, name: str) -> Iterable[Body] | None:
        index = self.seen.indexes.get(CONSUMERS)
        return None if index is None else index.get(shelves.consumer_key(namespace, name), ())

    def _indexed_pods(
        self, namespace: str, selector: specs.Selector | None
    ) -> Iterable[Body] | None:
        index = self.seen.indexes.get(PODS)
        if selector is None:
            return ()
        if index is None:
            return None
        return index.get(shelves.pod_lookup(namespace, selector), ())

    def _indexed_configmaps(self, namespace: str, consumer: str) -> Iterable[Body] | None:
        index = self.seen.indexes.get(CONFIGMAPS)
        if index is None:
            return None
        return index.get((namespace, configmaps.label_value(consumer)), ())

    def refresh(self, *, namespace: str, name: str) -> None:
        """A write was refused for a stale read (409): everything the consumer's cycle reads
        is read afresh from the API server by its next cycle (three requests)."""
        roster = self.seen.rosters.by_key.get((namespace, name))
        if roster is not None:
            roster.stale |= set(shelves.KINDS)

    def forget(self, *, namespace: str, name: str) -> None:
        """The consumer's daemon stopped: its roster goes."""
        self.seen.rosters.remove(namespace, name)

    def following(self) -> list[Key]:
        """The consumers whose rosters are kept."""
        return list(self.seen.rosters.by_key)

    def roster(self, *, namespace: str, name: str) -> rosters.Roster | None:
        return self.seen.rosters.by_key.get((namespace, name))
