"""kopf's watch streams over a `fakes.FakeKube`, delivered when a test says so.

`Watch` plays what kopf does for the operator: it replays the fake API server's ordered
record of changes (`fakes.FakeKube.changes`), one stream per kind, files each body in kopf's
indexes, and hands it to the handlers' cache (`cache.tracking.Tracking.observed` and `.event`). A
test decides when each stream is delivered and how far, so it can make a stream lag (deliver
old versions later, in order, after the operator's own newer writes), drop events (`skip`: a
silent reconnection that lost them), and re-list (`relist`: listing events of what exists,
and no DELETED for what vanished meanwhile, as kopf does after a 410).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers import cycles, memories, registering
from eventhub_balancer.handlers.cache import caches, shelves
from tests.support import fakes

#: The fake's kinds and the watch's names for them.
KINDS = {"consumer": shelves.CONSUMERS, "pod": shelves.PODS, "configmap": shelves.CONFIGMAPS}

Body = dict[str, Any]


def _watched(kind: str, body: Body) -> bool:
    """kopf watches only the ConfigMaps the operator manages (a label selector)."""
    if kind != "configmap":
        return True
    labels = body["metadata"].get("labels") or {}
    return labels.get(configmaps.LABEL_MANAGED_BY) == configmaps.MANAGED_BY


class Watch:
    """The three watch streams of one operator replica over one fake API."""

    def __init__(
        self,
        kube: fakes.FakeKube,
        cache: caches.Cache,
        *,
        operator: registering.Operator | None = None,
    ) -> None:
        self.kube = kube
        self.cache = cache
        #: with an operator, events go through its handlers (which also wake the daemons)
        self.operator = operator
        #: kopf's indexes: key -> the bodies filed under it
        self.indexes: dict[str, defaultdict[Any, list[Body]]] = {
            kind: defaultdict(list) for kind in KINDS.values()
        }
        #: per kind, how far into the fake's record of changes the stream has delivered
        self.cursors: dict[str, int] = dict.fromkeys(KINDS, 0)
        #: the consumers each delivery woke, in order
        self.woken: list[tuple[str, str]] = []
        for kind in KINDS:
            self.relist(kind)  # the first listing, before any daemon starts
        cache.following.attach(self.indexes)

    def behind(self, kind: str) -> int:
        """How many changes of ``kind`` the stream has not delivered yet."""
        return sum(1 for k, _, _ in self.kube.changes[self.cursors[kind] :] if k == kind)

    def deliver(self, *kinds: str, count: int | None = None) -> list[tuple[str, str]]:
        """The changes of ``kinds`` (all when none) not delivered yet, in order (at most
        ``count`` of each kind); the consumers woken."""
        woken: list[tuple[str, str]] = []
        for kind in kinds or tuple(KINDS):
            delivered = 0
            changes = self.kube.changes
            at = self.cursors[kind]
            while at < len(changes) and (count is None or delivered < count):
                k, body, event_type = changes[at]
                at += 1
                if k != kind or not _watched(k, body):
                    continue
                woken += self._event(kind, body, event_type)
                delivered += 1
            self.cursors[kind] = at
        self.woken += woken
        return woken

    def skip(self, *kinds: str) -> None:
        """The changes of ``kinds`` so far are never delivered (lost while a stream was down);
        only a re-list brings the watch back in step."""
        for kind in kinds or tuple(KINDS):
            self.cursors[kind] = len(self.kube.changes)

    def relist(self, kind: str) -> list[tuple[str, str]]:
        """kopf lists ``kind`` again: every object as a listing event (type None) and nothing
        else, as kopf's handlers see it: an object gone meanwhile stays in kopf's index and
        gets no event, an empty listing sends no event at all, and the end of the listing is
        not told."""
        woken: list[tuple[str, str]] = []
        current = [
            fakes.copied(body)
            for (k, _, _), body in self.kube.objects.items()
            if k == kind and _watched(k, body)
        ]
        self.cursors[kind] = len(self.kube.changes)
        for body in current:
            if self.cache.watch.observed(KINDS[kind], None):
                woken += self.cache.following.following()
            woken += self._event(kind, body, None, listing=True)
        self.woken += woken
        return woken

    # --- as kopf does it ---

    def _event(
        self, kind: str, body: Body, event_type: str | None, *, listing: bool = False
    ) -> list[tuple[str, str]]:
        delivered = fakes.copied(body)
        self._index(kind, delivered, deleted=event_type == "DELETED")
        if self.operator is not None and not listing:
            self.operator.observed(KINDS[kind], delivered, event_type)
            return []
        if not listing:
            self.cache.watch.observed(KINDS[kind], event_type)
        return self.cache.watch.event(KINDS[kind], delivered, event_type)

    def _index(self, kind: str, body: Body, *, deleted: bool) -> None:
        index = self.indexes[KINDS[kind]]
        meta = body["metadata"]
        for key in list(index):
            index[key] = [
                b
                for b in index[key]
                if (b["metadata"]["name"], b["metadata"].get("namespace"))
                != (meta["name"], meta.get("namespace"))
            ]
            if not index[key]:
                del index[key]
        if deleted:
            return
        for key in self._keys(kind, body):
            index[key].append(body)

    def _keys(self, kind: str, body: Body) -> Iterable[Any]:
        meta = body["metadata"]
        namespace, labels = meta.get("namespace", ""), meta.get("labels") or {}
        if kind == "consumer":
            return [shelves.consumer_key(namespace, meta["name"])]
        if kind == "pod":
            return shelves.pod_keys(namespace, labels)
        key = shelves.configmap_key(namespace, labels)
        return [] if key is None else [key]


class Replica:
    """One operator replica over a shared fake API: its cache, its watch, and per consumer
    its daemon's memory. `cycle` does what one turn of the daemon's loop does
    (`registering.run_daemon`): follow the roster, run the cycle, and on a conflict read the
    consumer afresh."""

    def __init__(
        self, kube: fakes.FakeKube, hubs: fakes.FakeHubs, *, clock: Callable[[], float]
    ) -> None:
        self.cache = caches.Cache(kube, clock=clock)
        self.watch = Watch(kube, self.cache)
        self.hubs = hubs
        self.memories: dict[tuple[str, str], memories.Memory] = {}
        self.failures: list[errors.EventHubBalancerError] = []

    async def cycle(
        self, namespace: str, name: str, *, now: datetime.datetime
    ) -> cycles.Result | None:
        """One cycle; None when it failed (the failure is kept in ``failures``)."""
        body = self.cache.following.roster(namespace=namespace, name=name)
        spec = (body.consumer if body is not None else None) or self.watch.kube.objects[
            "consumer", namespace, name
        ]
        try:
            selector: specs.Selector | None = specs.parse_spec(spec.get("spec") or {}).selector
        except errors.InvalidInput:
            selector = None
        self.cache.following.follow(namespace=namespace, name=name, selector=selector)
        memory = self.memories.setdefault((namespace, name), memories.Memory())
        try:
            return await cycles.run_cycle(
                kube=self.cache.view,
                hubs=self.hubs,
                namespace=namespace,
                name=name,
                memory=memory,
                now=now,
            )
        except (errors.Conflict, errors.NotFound) as e:
            self.cache.following.refresh(namespace=namespace, name=name)
            self.failures.append(e)
            return None
