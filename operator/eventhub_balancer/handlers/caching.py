"""The operator's view of the cluster, served from kopf's watch streams: no read per cycle.

kopf already watches EventHubConsumers, pods and the assignment ConfigMaps (their events wake
the daemons). Its indexes (`kopf.index`, registered in `registering`) keep the bodies those
streams deliver, and kopf starts no handler, daemons included, before every index holds its
first listing. `CachedKube` serves a cycle's reads from them, so that a steady state costs
the API server nothing and a cycle's reads cost a lookup, not a listing of the fleet: kopf
lists again only after a watch error.

Three gaps of a view fed by watches are closed here:

- the operator's own writes: a cycle that starts before the watch delivered them would see
  the old ConfigMaps and write again with a stale resourceVersion (a Conflict, a retry). The
  response of each write is kept (`_pending`) until the index holds that version or a newer
  one; only writes still in flight are kept, so this costs what changed, not the fleet;
- a re-list after a watch error drops nothing from kopf's indexes: an object deleted while the
  watch was down gets no DELETED event. The event handlers report every event (`observed`);
  a listing event after watch events is a re-list, and the next read of each scope lists it
  once through the adapter and hides what that listing lacks (by uid);
- Secrets are not watched (that would need list/watch on every Secret of the namespace): a
  value is kept until a dependency rejects what it was used for (`forget_secret`) or for
  `SECRET_REFRESH_SECONDS`.

Before kopf hands the indexes over (`attach`), and in tests without kopf, every read goes to
the adapter, as it did before the cache.

What a consumer's cycle reads changes only through events, and the event handlers say which
consumers each event concerns (`touch`) and which pod or ConfigMap changed for them
(`feeds.Feeds`, which the operator's own writes tell too). `stamp` sums the first up, so that
a cycle can tell that nothing it reads changed without reading it (`cycles`); `changed` hands
a consumer's reader the names alone, which it reads by name (`pods_by_name`,
`configmaps_by_name`, through the same kept writes and hidden uids as a listing), so that a
cycle reads what changed, not the fleet. `mark` says when that is not enough (a re-list, a
kept write given up): the reader then lists whole.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers import feeds, indexkeys, ports
from eventhub_balancer.handlers.indexkeys import CONFIGMAPS, CONSUMERS, PEERS, PODS
from eventhub_balancer.reconciling import conflicts

logger = logging.getLogger(__name__)

#: How long a Secret's value is used unless rejected: a rotated key is picked up within it.
SECRET_REFRESH_SECONDS = 600.0

#: A write's response is served at most this long: the watch delivers within seconds, and what
#: it never delivers (a pod deleted right after it was annotated) is not kept for ever.
PENDING_SECONDS = 60.0

Body = Mapping[str, Any]
#: A kopf index as the daemons receive it: key -> the bodies (or summaries) filed under it.
Index = Mapping[Any, Iterable[Any]]


def _meta(body: Body) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = body.get("metadata") or {}
    return meta


def _newer(a: Body, b: Body) -> bool:
    """Whether ``a`` is a later version of the object than ``b``. Resource versions are
    opaque by contract but integers on every API server we know; if not, the watch wins."""
    try:
        return int(_meta(a).get("resourceVersion") or 0) > int(_meta(b).get("resourceVersion") or 0)
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Deleted:
    uid: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Secret:
    value: str
    read_at: float


class CachedKube:
    """`ports.KubePort` with reads from kopf's indexes and writes through to the adapter."""

    def __init__(self, api: ports.KubePort, *, clock: Callable[[], float] = time.monotonic):
        self.api = api
        #: the adapter's counters, shared: writes go through it
        self.writes = api.writes
        self.clock = clock
        self._indexes: dict[str, Index] = {}
        #: writes the watch has not delivered yet: (kind, namespace, name) -> body or deletion
        self._pending: dict[tuple[str, str, str], Body | _Deleted] = {}
        self._pending_at: dict[tuple[str, str, str], float] = {}
        self._secrets: dict[tuple[str, str, str], _Secret] = {}
        #: re-lists seen per kind, and per scope the count it was last listed at
        self._relists: dict[str, int] = {}
        self._streaming: dict[str, bool] = {}
        self._synced: dict[tuple[str, str, str], int] = {}
        self._hidden: set[str] = set()
        #: reads that went to the API server (the fallbacks), for the benchmark
        self.reads = 0
        #: events per consumer that concerned it (`touch`), and kept writes given up
        self._touched: dict[tuple[str, str], int] = {}
        self._given_up = 0
        #: per consumer, the pods and ConfigMaps whose served body may have changed since its
        #: reader last asked (`changed`)
        self.feeds = feeds.Feeds(kinds=(PODS, CONFIGMAPS))

    def attach(self, indexes: Mapping[str, Index]) -> None:
        """Serve reads from kopf's indexes from now on (called by each daemon at start)."""
        self._indexes = dict(indexes)

    def observed(self, kind: str, event_type: str | None) -> None:
        """An event of the watch of ``kind``: None is a listing; one after watch events
        starts a re-list, and every scope of the kind is listed once more at its next read."""
        if event_type is None:
            if self._streaming.get(kind):
                self._relists[kind] = self._relists.get(kind, 0) + 1
                logger.info("the watch of %s listed again; re-reading each scope once", kind)
            self._streaming[kind] = False
        else:
            self._streaming[kind] = True

    def touch(self, namespace: str, name: str, *, told: bool = False) -> None:
        """An event concerned the consumer: what its cycle reads may have changed. ``told``:
        the feed was told which object; otherwise its reader reads whole."""
        key = (namespace, name)
        self._touched[key] = self._touched.get(key, 0) + 1
        if not told:
            self.feeds.whole(key)

    def stamp(self, *, namespace: str, name: str) -> tuple[int, int, tuple[int, ...]] | None:
        """What changes whenever the pods or ConfigMaps a consumer's cycle reads may have
        changed (events, re-lists, kept writes given up); None before the indexes are attached."""
        if not self._indexes:
            return None
        relists = tuple(self._relists.get(kind, 0) for kind in (CONSUMERS, PODS, CONFIGMAPS))
        return (self._touched.get((namespace, name), 0), self._given_up, relists)

    def forget(self, *, namespace: str, name: str) -> None:
        """The consumer's daemon stopped: its count of events and its feed are dropped."""
        self._touched.pop((namespace, name), None)
        self.feeds.forget((namespace, name))

    # --- the change feed: what a consumer's reader reads again (`observing.observe_pods`) ---

    def mark(self) -> Hashable:
        """What changes the view unnamed (a re-list, a kept write given up): read whole."""
        return (self._given_up, self._relists.get(PODS, 0), self._relists.get(CONFIGMAPS, 0))

    def changed(self, *, namespace: str, name: str) -> feeds.Changed | None:
        """The names told since the reader last asked (`feeds.Feeds.take`); None: read whole."""
        if not self._indexes:
            return None
        return self.feeds.take((namespace, name))

    def pods_by_name(
        self, *, namespace: str, names: Iterable[str], selector: specs.Selector
    ) -> dict[str, Body | None]:
        """Each named pod as `select_pods` serves it now, or None (gone, or not selected)."""
        index = self._indexes[PODS]
        found: dict[str, Body | None] = {}
        for name in names:
            filed = _lookup(index, indexkeys.ByName(namespace, name))
            bodies = self._merge(PODS, namespace, list(filed))
            body = next((b for b in bodies if _meta(b).get("name") == name), None)
            selected = body is not None and selector.matches(_meta(body).get("labels") or {})
            found[name] = body if selected else None
        return found

    def configmaps_by_name(
        self, *, namespace: str, consumer: str, names: Iterable[str]
    ) -> dict[str, Body | None]:
        """Each named ConfigMap as `consumer_configmaps` serves it now, or None."""
        index = self._indexes[CONFIGMAPS]
        mine = _ours(consumer)
        found: dict[str, Body | None] = {}
        for name in names:
            filed = _lookup(index, indexkeys.ByName(namespace, name))
            bodies = self._merge(CONFIGMAPS, namespace, list(filed), created=mine)
            body = next((b for b in bodies if _meta(b).get("name") == name), None)
            found[name] = body if body is not None and mine(body) else None
        return found

    # --- reads ---

    async def get_consumer(self, *, namespace: str, name: str) -> specs.ConsumerBody:
        index = self._indexes.get(CONSUMERS)
        if index is None:
            self.reads += 1
            return await self.api.get_consumer(namespace=namespace, name=name)
        bodies = list(_lookup(index, indexkeys.consumer_key(namespace, name)))
        served = self._merge(CONSUMERS, namespace, bodies, created=lambda _: False)
        if not served:
            raise errors.NotFound(f"EventHubConsumer {namespace}/{name}: not found")
        body: Any = served[0]
        return dict(body)  # type: ignore[return-value]

    async def select_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> list[Mapping[str, Any]]:
        index = self._indexes.get(PODS)
        if index is None:
            self.reads += 1
            return list(await self.api.select_pods(namespace=namespace, selector=selector))
        labels = sorted(selector.match_labels.items())
        key = (namespace, *labels[0]) if labels else (namespace,)
        scope = (PODS, namespace, selector.to_query())
        await self._resync(
            scope,
            lambda: self.api.select_pods(namespace=namespace, selector=selector),
            lambda b: selector.matches(_meta(b).get("labels") or {}),
        )
        bodies = [b for b in _lookup(index, key) if selector.matches(_meta(b).get("labels") or {})]
        return self._merge(PODS, namespace, bodies, created=lambda _: False)

    async def consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> list[Mapping[str, Any]]:
        index = self._indexes.get(CONFIGMAPS)
        if index is None:
            self.reads += 1
            return list(await self.api.consumer_configmaps(namespace=namespace, consumer=consumer))
        label = configmaps.label_value(consumer)
        scope = (CONFIGMAPS, namespace, label)
        mine = _ours(consumer)
        await self._resync(
            scope,
            lambda: self.api.consumer_configmaps(namespace=namespace, consumer=consumer),
            mine,
        )
        bodies = list(_lookup(index, (namespace, label)))
        return self._merge(CONFIGMAPS, namespace, bodies, created=mine)

    def peers(self) -> tuple[conflicts.Peer, ...]:
        """Every EventHubConsumer the watch delivered, summed up (one pass over the index);
        none before kopf hands the indexes over."""
        index = self._indexes.get(PEERS)
        if index is None:
            return ()
        return tuple(
            peer
            for filed in index.values()
            for peer in filed
            if isinstance(peer, conflicts.Peer) and peer.uid not in self._hidden
        )

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str:
        """The value kept since the last read, unless rejected or older than the refresh."""
        now = self.clock()
        kept = self._secrets.get((namespace, name, key))
        if kept is not None and now - kept.read_at < SECRET_REFRESH_SECONDS:
            return kept.value
        self.reads += 1
        value = await self.api.read_secret_key(namespace=namespace, name=name, key=key)
        self._secrets[namespace, name, key] = _Secret(value=value, read_at=now)
        return value

    def forget_secret(self, *, namespace: str, name: str) -> None:
        """What a dependency rejected (or failed with) is read afresh at the next attempt."""
        for cached in [k for k in self._secrets if k[:2] == (namespace, name)]:
            del self._secrets[cached]

    async def _resync(
        self,
        scope: tuple[str, str, str],
        listing: Callable[[], Awaitable[Iterable[Body]]],
        belongs: Callable[[Body], bool],
    ) -> None:
        """After a re-list of the scope's kind, list the scope once: what the listing lacks
        was deleted while the watch was down, and is hidden from then on (uids are unique).
        Costs one listing and a pass over the index, after a watch error only."""
        relists = self._relists.get(scope[0], 0)
        if self._synced.get(scope, 0) >= relists:
            return
        self.reads += 1
        present = {str(_meta(b).get("uid", "")) for b in await listing()}
        for bodies in self._indexes[scope[0]].values():
            for body in bodies:
                meta = _meta(body)
                uid = str(meta.get("uid", ""))
                if meta.get("namespace") == scope[1] and uid not in present and belongs(body):
                    self._hidden.add(uid)
        self._synced[scope] = relists

    def _merge(
        self,
        kind: str,
        namespace: str,
        bodies: Iterable[Body],
        *,
        created: Callable[[Body], bool] = lambda _: False,
    ) -> list[Mapping[str, Any]]:
        """The index's bodies with the operator's own writes the watch has not delivered."""
        served: dict[str, Body] = {}
        for body in bodies:
            meta = _meta(body)
            if str(meta.get("uid", "")) in self._hidden:
                continue
            name = str(meta.get("name", ""))
            key = (kind, namespace, name)
            pending = self._pending.get(key)
            if isinstance(pending, _Deleted):
                if pending.uid and pending.uid == meta.get("uid"):
                    continue  # deleted by us; the watch has not said so yet
                del self._pending[key]
            elif pending is not None:
                if _newer(pending, body):
                    served[name] = pending
                    continue
                del self._pending[key]
            served[name] = body
        for (k, ns, name), pending in list(self._pending.items()):
            if k != kind or ns != namespace or name in served or isinstance(pending, _Deleted):
                continue
            if created(pending):  # created by us, not delivered yet
                served[name] = pending
        return list(served.values())

    # --- writes: through to the adapter, the responses kept until the watch has them ---

    def _wrote(self, kind: str, namespace: str, body: Body | None) -> None:
        if body is not None and self._indexes:
            name = str(_meta(body).get("name", ""))
            self._keep((kind, namespace, name), body)
            self.feeds.note_all(namespace, kind=kind, object_name=name)

    def _keep(self, key: tuple[str, str, str], pending: Body | _Deleted) -> None:
        now = self.clock()
        for old in [k for k, at in self._pending_at.items() if now - at > PENDING_SECONDS]:
            if self._pending.pop(old, None) is not None:
                self._given_up += 1
            del self._pending_at[old]
        self._pending[key] = pending
        self._pending_at[key] = now

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result = await self.api.create_configmap(namespace=namespace, body=body)
        self._wrote(CONFIGMAPS, namespace, result)
        return result

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        result = await self.api.patch_configmap(
            namespace=namespace, name=name, patch=patch, resource_version=resource_version
        )
        self._wrote(CONFIGMAPS, namespace, result)
        return result

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None:
        await self.api.delete_configmap(namespace=namespace, name=name, uid=uid)
        if self._indexes and uid:
            self._keep((CONFIGMAPS, namespace, name), _Deleted(uid=uid))
            self.feeds.note_all(namespace, kind=CONFIGMAPS, object_name=name)

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Mapping[str, Any] | None:
        result = await self.api.patch_pod_annotations(
            namespace=namespace, name=name, annotations=annotations
        )
        self._wrote(PODS, namespace, result)
        return result

    async def patch_consumer_status(
        self, *, namespace: str, name: str, status: Mapping[str, Any]
    ) -> specs.ConsumerBody:
        result = await self.api.patch_consumer_status(namespace=namespace, name=name, status=status)
        self._wrote(CONSUMERS, namespace, result)
        return result

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        await self.api.create_event(namespace=namespace, body=body)


def _lookup(index: Index, key: Any) -> Iterable[Body]:
    return index.get(key, ())


def _ours(consumer: str) -> Callable[[Body], bool]:
    """Whether a ConfigMap carries ``consumer``'s label (what its listing selects)."""
    label = configmaps.label_value(consumer)

    def mine(body: Body) -> bool:
        return bool((_meta(body).get("labels") or {}).get(configmaps.LABEL_CONSUMER) == label)

    return mine
