"""The operator's view of the cluster: each consumer's roster, kept by the watch handlers.

kopf watches EventHubConsumers, pods and the assignment ConfigMaps. Their event handlers
(`registering`) hand every event to `CachedKube`, which offers the body to the roster of each
consumer it may concern (`rosters.Roster`: the one cache mechanism, newest version wins), and
says which rosters changed, so that exactly those consumers are woken. A cycle reads its
consumer's roster: a steady state costs the API server nothing, and a cycle's reads cost a
copy of what its roster holds.

kopf's indexes (`kopf.index`, registered in `registering`) are only where a roster starts:
kopf starts no daemon before every index holds its first listing, and a consumer's daemon
fills its roster from them (`follow`), synchronously, so no event falls between the two.

Safety does not rest on this view being right. Every write that depends on it carries a
precondition (the CR's resourceVersion for the status, the ConfigMap's for its patch, create
only for a new one), so a stale view costs a 409, and a 409 makes the consumer read afresh
(`refresh`). The view is also read afresh, per consumer and per kind, when it may be stale:

- after kopf lists a kind again (a watch error, a 410): the next read of each roster lists its
  scope once (`rosters.Roster.resync` removes only what the listing lacks and is no newer);
- when the watch does not echo one of the operator's own writes within
  `rosters.ECHO_SECONDS`: that watch lags or stalled (`follow`).

Three parts share the rosters, each with one job and reached through its own port
(`ports`):

- `Tracking` (`ports.WatchPort`): the change tracking. The watch handlers hand it every
  event; it offers the body to the rosters it may concern and says whom to wake.
- `Following` (`ports.RosterPort`): the rosters' lifecycle. A daemon starts its roster from
  kopf's indexes, keeps its selector current, and marks what must be read afresh.
- `CachedKube` (`ports.KubePort`): the cycle's reads, from the rosters, and its writes,
  through to the API server with each response entered at once (the overlay of the
  operator's own writes is each roster's newest-version rule).

`Cache` builds the three over one `Seen` for an operator.

Secrets are not watched: their values are kept by `secretvalues.SecretValues`.

A port used without `follow` (a tool, a test over the bare API) reads through to the adapter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers import indexkeys, ports, rosters, secretvalues
from eventhub_balancer.handlers.indexkeys import CONFIGMAPS, CONSUMERS, PEERS, PODS
from eventhub_balancer.reconciling import conflicts, observations

logger = logging.getLogger(__name__)

Body = Mapping[str, Any]
Key = tuple[str, str]  # (namespace, consumer)
#: A kopf index as the daemons receive it: key -> the bodies (or summaries) filed under it.
Index = Mapping[Any, Iterable[Any]]

#: The watch's kind names (`indexkeys`) as the rosters name them.
_KINDS = {CONSUMERS: rosters.CONSUMER, PODS: rosters.PODS, CONFIGMAPS: rosters.CONFIGMAPS}


def _meta(body: Body) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = body.get("metadata") or {}
    return meta


def _labelled(consumer: str) -> Callable[[Body], bool]:
    """Whether a ConfigMap is managed by the operator and carries ``consumer``'s label (what
    its watch and its listing select)."""
    label = configmaps.label_value(consumer)

    def labelled(body: Body) -> bool:
        labels = _meta(body).get("labels") or {}
        return bool(
            labels.get(configmaps.LABEL_CONSUMER) == label
            and labels.get(configmaps.LABEL_MANAGED_BY) == configmaps.MANAGED_BY
        )

    return labelled


def _selects(selector: specs.Selector | None) -> Callable[[Body], bool]:
    """Whether the selector matches a pod (no selector, an invalid spec: none)."""

    def selects(body: Body) -> bool:
        return selector is not None and selector.matches(_meta(body).get("labels") or {})

    return selects


@dataclasses.dataclass(eq=False)
class Seen:
    """What the three parts share: the rosters, the indexes they start from, the kinds kopf
    has listed again, and the peers' summaries."""

    #: the rosters, and which of them each object may concern
    rosters: rosters.Rosters = dataclasses.field(default_factory=rosters.Rosters)
    #: kopf's indexes, handed over by each daemon at start (`Following.attach`)
    indexes: dict[str, Index] = dataclasses.field(default_factory=dict)
    #: the kinds kopf has listed again since the start: their indexes may still hold
    #: objects that vanished meanwhile, so a new roster lists those kinds once
    relisted: set[str] = dataclasses.field(default_factory=set)
    #: every EventHubConsumer summed up, as of the last CR event (`CachedKube.peers`); None:
    #: build it again from the index at the next ask
    peers: tuple[conflicts.Peer, ...] | None = None


class Tracking:
    """`ports.WatchPort`: every watch event, offered to the rosters it may concern."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
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
            self.seen.relisted.add(_KINDS[kind])
            for roster in self.seen.rosters.by_key.values():
                roster.stale.add(_KINDS[kind])
        return relist

    def event(self, kind: str, body: Body, event_type: str | None) -> list[Key]:
        """A watch event's body, offered to every roster it may concern (that selects it or
        holds its name, `rosters.Rosters.candidates`); the consumers whose roster changed."""
        meta = _meta(body)
        namespace = str(meta.get("namespace") or "")
        deleted = event_type == "DELETED"
        shelf = _KINDS[kind]
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


class Following:
    """`ports.RosterPort`: one roster per running consumer, started and kept by its daemon."""

    def __init__(self, seen: Seen, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seen = seen
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
                selects=_selects(selector),
                labelled=_labelled(name),
                scope=scope,
            )
            kept.add(roster, lookup=lookup, label=configmaps.label_value(name))
            self._fill(roster, rosters.CONSUMER, self._indexed_consumer(namespace, name))
            self._fill(roster, rosters.CONFIGMAPS, self._indexed_configmaps(namespace, name))
            self._fill(roster, rosters.PODS, self._indexed_pods(namespace, selector))
        elif roster.scope != scope:
            # Another selector: the pods start afresh; the CR and ConfigMaps carry on.
            kept.rescope(roster, scope=scope, lookup=lookup, selects=_selects(selector))
            self._fill(roster, rosters.PODS, self._indexed_pods(namespace, selector))
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
            roster.stale |= overdue | {rosters.PODS}

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
            roster.stale |= set(rosters.KINDS)

    def forget(self, *, namespace: str, name: str) -> None:
        """The consumer's daemon stopped: its roster goes."""
        self.seen.rosters.remove(namespace, name)

    def following(self) -> list[Key]:
        """The consumers whose rosters are kept."""
        return list(self.seen.rosters.by_key)

    def roster(self, *, namespace: str, name: str) -> rosters.Roster | None:
        return self.seen.rosters.by_key.get((namespace, name))


class CachedKube:
    """`ports.KubePort` with reads from the consumers' rosters, writes through the adapter."""

    def __init__(
        self,
        api: ports.ListingPort,
        *,
        seen: Seen | None = None,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[Key], None] = lambda key: None,
    ):
        self.api = api
        #: wakes a consumer whose roster a write's answer told something new (`rosters.news`)
        self.wake = wake
        #: the adapter's counters, shared: writes go through it
        self.writes = api.writes
        self.clock = clock
        self.seen = seen if seen is not None else Seen()
        self._rosters = self.seen.rosters
        self._secrets = secretvalues.SecretValues(api.read_secret_key, clock=clock)
        #: the roster reads that went to the API server (`reads` adds the Secrets')
        self._reads = 0

    @property
    def reads(self) -> int:
        """Every read that went to the API server, Secrets included."""
        return self._reads + self._secrets.reads

    def stamp(self, *, namespace: str, name: str) -> Hashable | None:
        """What changes whenever what the consumer's cycle reads may have changed; None
        when that is not known (no roster, or something to read afresh first)."""
        roster = self._rosters.by_key.get((namespace, name))
        if roster is None or roster.stale:
            return None
        return (id(roster), roster.version)

    # --- reads ---

    async def get_consumer(self, *, namespace: str, name: str) -> specs.ConsumerBody:
        roster = self._rosters.by_key.get((namespace, name))
        if roster is None:
            self._reads += 1
            return await self.api.get_consumer(namespace=namespace, name=name)
        if rosters.CONSUMER in roster.stale:
            self._reads += 1
            with roster.asking(rosters.CONSUMER):
                try:
                    roster.fresh(
                        rosters.CONSUMER,
                        await self.api.get_consumer(namespace=namespace, name=name),
                    )
                except errors.NotFound:
                    roster.resync(rosters.CONSUMER, (), at=None)
        body: Any = roster.consumer
        if body is None:
            raise errors.NotFound(f"EventHubConsumer {namespace}/{name}: not found")
        return body  # type: ignore[no-any-return]

    async def select_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> list[Mapping[str, Any]]:
        roster = self._rosters.by_scope.get((namespace, selector.to_query()))
        if roster is None:
            self._reads += 1
            return list(await self.api.select_pods(namespace=namespace, selector=selector))
        if rosters.PODS in roster.stale:
            self._reads += 1
            with roster.asking(rosters.PODS):
                listing = await self.api.list_selected_pods(namespace=namespace, selector=selector)
                self._rosters.resync(
                    roster,
                    rosters.PODS,
                    listing.items,
                    at=rosters.number(listing.metadata.get("resourceVersion")),
                )
        return roster.items(rosters.PODS)

    async def consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> list[Mapping[str, Any]]:
        roster = self._rosters.by_key.get((namespace, consumer))
        if roster is None:
            self._reads += 1
            return list(await self.api.consumer_configmaps(namespace=namespace, consumer=consumer))
        if rosters.CONFIGMAPS in roster.stale:
            self._reads += 1
            with roster.asking(rosters.CONFIGMAPS):
                listing = await self.api.list_consumer_configmaps(
                    namespace=namespace, consumer=consumer
                )
                self._rosters.resync(
                    roster,
                    rosters.CONFIGMAPS,
                    listing.items,
                    at=rosters.number(listing.metadata.get("resourceVersion")),
                )
        return roster.items(rosters.CONFIGMAPS)

    def departures(self, *, namespace: str, name: str) -> observations.Departures:
        """What the consumer's pods as last read say of the pods they lack."""
        roster = self._rosters.by_key.get((namespace, name))
        if roster is None:
            return observations.UNCACHED  # read through: what they lack is gone
        return observations.Departures(
            listed=roster.shelves[rosters.PODS].listed, departed=roster.departed()
        )

    def forget_pods(self, *, namespace: str, name: str) -> None:
        """The consumer's pods are listed afresh at their next read."""
        roster = self._rosters.by_key.get((namespace, name))
        if roster is not None:
            roster.stale.add(rosters.PODS)

    async def read_configmap(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        """One ConfigMap afresh from the API server (a write conflicted); the rosters that
        hold or select it take it too."""
        self._reads += 1
        with self._asking(rosters.CONFIGMAPS, namespace, {"metadata": {"name": name}}):
            body = await self.api.read_configmap(namespace=namespace, name=name)
            if body is not None:
                self._offer(rosters.CONFIGMAPS, namespace, body)
        return body

    def peers(self) -> tuple[conflicts.Peer, ...]:
        """Every EventHubConsumer the watch delivered, summed up; none before kopf hands the
        indexes over. One value, built again only after a CR event (`Tracking.observed`): at
        1,000 consumers a pass over the index in every cycle was an eighth of the operator's
        CPU, and the same value lets a settled decision compare its peers by identity."""
        if self.seen.peers is None:
            index = self.seen.indexes.get(PEERS)
            if index is None:
                return ()
            self.seen.peers = tuple(peer for filed in index.values() for peer in filed)
        return self.seen.peers

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str:
        """The value kept since the last read, unless rejected or older than the refresh."""
        return await self._secrets.get(namespace=namespace, name=name, key=key)

    def forget_secret(self, *, namespace: str, name: str) -> None:
        self._secrets.forget(namespace=namespace, name=name)

    # --- writes: through to the adapter, each response served at once ---

    @contextlib.contextmanager
    def _asking(self, kind: str, namespace: str, body: Body) -> Iterator[None]:
        """Around a request whose answer enters the rosters that hold or select ``body``
        (`rosters.Roster.asking`)."""
        with contextlib.ExitStack() as stack:
            for roster in self._rosters.candidates(kind, namespace, body, keys=()):
                stack.enter_context(roster.asking(kind))
            yield

    def _offer(
        self,
        kind: str,
        namespace: str,
        body: Body,
        *,
        wrote: bool = False,
        touched: Iterable[str] = (),
    ) -> None:
        """A write's response (``touched``: the annotations the write set), or a body read
        afresh, to the rosters it may concern."""
        keys = (
            indexkeys.pod_keys(namespace, _meta(body).get("labels") or {})
            if kind == rosters.PODS
            else ()
        )
        name = str(_meta(body).get("name") or "")
        for roster in self._rosters.candidates(kind, namespace, body, keys=keys):
            if wrote:
                before = roster.shelves[kind].items.get(name)
                taken = self._rosters.wrote(roster, kind, body, now=self.clock())
                if (
                    taken
                    and before is not None
                    and rosters.news(kind, before, body, touched=touched)
                ):
                    self.wake((roster.namespace, roster.name))
            else:
                self._rosters.offer(roster, kind, body)

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._asking(rosters.CONFIGMAPS, namespace, body):
            result = await self.api.create_configmap(namespace=namespace, body=body)
            self._offer(rosters.CONFIGMAPS, namespace, result, wrote=True)
        return result

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        with self._asking(rosters.CONFIGMAPS, namespace, {"metadata": {"name": name}}):
            result = await self.api.patch_configmap(
                namespace=namespace, name=name, patch=patch, resource_version=resource_version
            )
            touched = ((patch.get("metadata") or {}).get("annotations") or {}).keys()
            self._offer(rosters.CONFIGMAPS, namespace, result, wrote=True, touched=touched)
        return result

    async def replace_configmap_data(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        generation: str,
        data: Mapping[str, str],
    ) -> dict[str, Any]:
        with self._asking(rosters.CONFIGMAPS, namespace, {"metadata": {"name": name}}):
            result = await self.api.replace_configmap_data(
                namespace=namespace, name=name, uid=uid, generation=generation, data=data
            )
            self._offer(rosters.CONFIGMAPS, namespace, result, wrote=True)
        return result

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None:
        await self.api.delete_configmap(namespace=namespace, name=name, uid=uid)
        gone = {"metadata": {"name": name}}
        for roster in self._rosters.candidates(rosters.CONFIGMAPS, namespace, gone, keys=()):
            self._rosters.deleted(
                roster, rosters.CONFIGMAPS, name=name, uid=uid or "", now=self.clock()
            )

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Mapping[str, Any] | None:
        with self._asking(rosters.PODS, namespace, {"metadata": {"name": name}}):
            result = await self.api.patch_pod_annotations(
                namespace=namespace, name=name, annotations=annotations
            )
            if result is not None:
                self._offer(rosters.PODS, namespace, result, wrote=True)
        return result

    async def patch_consumer_status(
        self,
        *,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> specs.ConsumerBody:
        roster = self._rosters.by_key.get((namespace, name))
        with roster.asking(rosters.CONSUMER) if roster is not None else contextlib.nullcontext():
            result = await self.api.patch_consumer_status(
                namespace=namespace, name=name, status=status, resource_version=resource_version
            )
            if roster is not None:
                before = roster.consumer
                if roster.wrote(rosters.CONSUMER, result, now=self.clock()) and (
                    before is not None and rosters.news(rosters.CONSUMER, before, result)
                ):
                    self.wake((namespace, name))
        return result

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        await self.api.create_event(namespace=namespace, body=body)


class Cache:
    """The three parts over one `Seen`, as an operator (or a test) holds them; the handlers
    reach each through its port: ``watch`` the watch handlers, ``rosters`` the daemons,
    ``kube`` the cycles."""

    def __init__(
        self,
        api: ports.ListingPort,
        *,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[Key], None] = lambda key: None,
    ) -> None:
        self.seen = Seen()
        self.watch = Tracking(self.seen)
        self.rosters = Following(self.seen, clock=clock)
        self.kube = CachedKube(api, seen=self.seen, clock=clock, wake=wake)
