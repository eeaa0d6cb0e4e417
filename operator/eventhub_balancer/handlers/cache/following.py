"""The rosters' lifecycle (`ports.RosterPort`): a daemon starts its consumer's roster from
kopf's indexes, keeps its selector current, and marks what must be read afresh.

kopf's indexes (`kopf.index`, registered in `kopfwiring`) are only where a roster starts: kopf
starts no daemon before every index holds its first listing, and a consumer's daemon fills its
roster from them (`Following.follow`), synchronously, so no event falls between the two.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers.cache import indexkeys, rosters, seen, shelves
from eventhub_balancer.handlers.cache.indexkeys import CONFIGMAPS, CONSUMERS, PODS
from eventhub_balancer.handlers.cache.shelves import Body

logger = logging.getLogger(__name__)

Key = seen.Key
Index = seen.Index


class Following:
    """`ports.RosterPort`: one roster per running consumer, started and kept by its daemon."""

    def __init__(self, shared: seen.Seen, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seen = shared
        self.clock = clock

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
        scope = selector.to_query() if selector is not None else None
        lookup = indexkeys.pod_lookup(namespace, selector) if selector is not None else None
        if roster is None:
            roster = rosters.Roster(
                namespace=namespace,
                name=name,
                selects=seen.selects(selector),
                labelled=seen.labelled(name),
                scope=scope,
            )
            kept.add(roster, lookup=lookup, label=configmaps.label_value(name))
            self._fill(roster, shelves.CONSUMER, self._indexed_consumer(namespace, name))
            self._fill(roster, shelves.CONFIGMAPS, self._indexed_configmaps(namespace, name))
            self._fill(roster, shelves.PODS, self._indexed_pods(namespace, selector))
        elif roster.scope != scope:
            # Another selector: the pods start afresh; the CR and ConfigMaps carry on.
            kept.rescope(roster, scope=scope, lookup=lookup, selects=seen.selects(selector))
            self._fill(roster, shelves.PODS, self._indexed_pods(namespace, selector))
        overdue = roster.overdue(now=self.clock())
        if overdue:
            logger.warning(
                "%s/%s: the watch of %s did not deliver the operator's own write within %.0f s;"
                " reading the consumer afresh",
                namespace,
                name,
                ", ".join(sorted(overdue)),
                rosters.ECHO_SECONDS,
            )
            # A watch cache that lags behind one kind's writes lags behind the pods too, and
            # the operator never writes pods: they are read afresh with what was missed.
            roster.stale |= overdue | {shelves.PODS}

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
        return None if index is None else index.get(indexkeys.consumer_key(namespace, name), ())

    def _indexed_pods(
        self, namespace: str, selector: specs.Selector | None
    ) -> Iterable[Body] | None:
        index = self.seen.indexes.get(PODS)
        if selector is None:
            return ()
        if index is None:
            return None
        return index.get(indexkeys.pod_lookup(namespace, selector), ())

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
