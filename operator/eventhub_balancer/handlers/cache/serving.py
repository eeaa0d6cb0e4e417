"""The cycle's reads and writes (`ports.KubePort`): reads from the consumer's roster, writes
through to the API server with each answer entered at once; and the Secret values kept
between cycles.

A steady state costs the API server nothing, and a cycle's reads cost a copy of what its
roster holds. A kind marked stale (after a re-list, a missing echo, a conflict) is read afresh
from the API server at its next read, for that consumer alone. The operator's own writes are
served from their answers (the overlay of the operator's own writes is each roster's
newest-version rule), and an answer that carries someone else's change wakes the consumer
(`shelves.news`).

Secrets are not watched: that would take list/watch on every Secret of each namespace. A value
is kept (`SecretValues`) until a dependency rejects what it was used for
(`SecretValues.forget`: the next attempt reads it afresh, so a rotated or fixed key is used as
soon as the backoff allows), until a consumer of its namespace is forgotten (`forget_secrets`:
the namespace may be deleted and created again), or for `REFRESH_SECONDS`. A value is never
logged or shown. Bound: the keys read within the last `REFRESH_SECONDS`. A value older than
that is never used again, so it is dropped when its time is up, whether or not anything is read
after it: the Secrets of consumers deleted (or edited to name others) do not stay for the life
of the operator, also when they were the last to read one.

A port used without a roster (a tool, a test over the bare API) reads through to the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import ports
from eventhub_balancer.handlers.cache import rosters, seen, shelves
from eventhub_balancer.handlers.cache.shelves import PEERS, Body
from eventhub_balancer.reconciling import conflicts, observations

Key = seen.Key

#: How long a Secret's value is used unless rejected: a rotated key is picked up within it.
REFRESH_SECONDS = 600.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Value:
    value: str
    read_at: float


class SecretValues:
    """Secret values by (namespace, name, key), each read through ``read`` when absent,
    rejected or older than `REFRESH_SECONDS`, and dropped once it is that old; at most one
    per key read in that time."""

    def __init__(self, read: Callable[..., Awaitable[str]], *, clock: Callable[[], float]) -> None:
        self._read = read
        self._clock = clock
        self._values: dict[tuple[str, str, str], _Value] = {}
        #: reads that went to the API server, for the benchmark
        self.reads = 0

    async def get(self, *, namespace: str, name: str, key: str) -> str:
        now = self._clock()
        kept = self._values.get((namespace, name, key))
        if kept is not None and now - kept.read_at < REFRESH_SECONDS:
            return kept.value
        self.reads += 1
        value = await self._read(namespace=namespace, name=name, key=key)
        for old in [k for k, v in self._values.items() if now - v.read_at >= REFRESH_SECONDS]:
            del self._values[old]
        self._values[namespace, name, key] = _Value(value=value, read_at=now)
        # Dropped when its time is up even if nothing is read after it (the timer holds the
        # key and the time of the read, never the value).
        asyncio.get_running_loop().call_later(
            REFRESH_SECONDS, self._expire, (namespace, name, key), now
        )
        return value

    def _expire(self, key: tuple[str, str, str], read_at: float) -> None:
        kept = self._values.get(key)
        if kept is not None and kept.read_at == read_at:
            del self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def forget(self, *, namespace: str, name: str | None = None) -> None:
        """What a dependency rejected (or failed with) is read afresh at the next attempt;
        without ``name``, every value of the namespace."""
        for kept in [k for k in self._values if k[0] == namespace and name in (None, k[1])]:
            del self._values[kept]


class CachedKube:
    """`ports.KubePort` with reads from the consumers' rosters, writes through the adapter."""

    def __init__(
        self,
        api: ports.ListingPort,
        *,
        shared: seen.Seen | None = None,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[Key], None] = lambda key: None,
    ):
        self.api = api
        #: wakes a consumer whose roster a write's answer told something new (`shelves.news`)
        self.wake = wake
        #: the adapter's counters, shared: writes go through it
        self.writes = api.writes
        self.clock = clock
        self.seen = shared if shared is not None else seen.Seen()
        self._rosters = self.seen.rosters
        self._secrets = SecretValues(api.read_secret_key, clock=clock)
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
        if shelves.CONSUMER in roster.stale:
            self._reads += 1
            with roster.asking(shelves.CONSUMER):
                try:
                    roster.fresh(
                        shelves.CONSUMER,
                        await self.api.get_consumer(namespace=namespace, name=name),
                    )
                except errors.NotFound:
                    roster.resync(shelves.CONSUMER, (), at=None)
        body: Any = roster.consumer
        if body is None:
            raise errors.NotFound(f"EventHubConsumer {namespace}/{name}: not found")
        return body  # type: ignore[no-any-return]

    async def select_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> list[Mapping[str, Any]]:
        scope = shelves.pod_scope(selector, self.seen.pod_scope)
        roster = self._rosters.by_scope.get((namespace, scope))
        selector = selector.both(self.seen.pod_scope)  # the pods the operator watches at all
        if roster is None:
            self._reads += 1
            return list(await self.api.select_pods(namespace=namespace, selector=selector))
        if shelves.PODS in roster.stale:
            await self._relist(
                roster,
                shelves.PODS,
                self.api.list_selected_pods(namespace=namespace, selector=selector),
            )
        return roster.items(shelves.PODS)

    async def consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> list[Mapping[str, Any]]:
        roster = self._rosters.by_key.get((namespace, consumer))
        if roster is None:
            self._reads += 1
            return list(await self.api.consumer_configmaps(namespace=namespace, consumer=consumer))
        if shelves.CONFIGMAPS in roster.stale:
            await self._relist(
                roster,
                shelves.CONFIGMAPS,
                self.api.list_consumer_configmaps(namespace=namespace, consumer=consumer),
            )
        return roster.items(shelves.CONFIGMAPS)

    async def _relist(
        self, roster: rosters.Roster, shelf: str, listed: Awaitable[listings.Listing]
    ) -> None:
        """Read a stale ``shelf`` of ``roster`` afresh: the listing is entered as of its
        resourceVersion, and a removal seen while it was asked stays removed."""
        self._reads += 1
        with roster.asking(shelf):
            listing = await listed
            self._rosters.resync(
                roster,
                shelf,
                listing.items,
                at=shelves.number(listing.metadata.get("resourceVersion")),
            )

    def departures(self, *, namespace: str, name: str) -> observations.Departures:
        """What the consumer's pods as last read say of the pods they lack."""
        roster = self._rosters.by_key.get((namespace, name))
        if roster is None:
            return observations.UNCACHED  # read through: what they lack is gone
        departed = roster.departed()
        return observations.Departures(
            listed=roster.shelves[shelves.PODS].listed,
            departed=departed,
            left=departed & roster.shelves[shelves.PODS].left,
            vanished=roster.vanished(),
        )

    def forget_pods(self, *, namespace: str, name: str) -> None:
        """The consumer's pods are listed afresh at their next read."""
        roster = self._rosters.by_key.get((namespace, name))
        if roster is not None:
            roster.stale.add(shelves.PODS)

    async def read_configmap(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        """One ConfigMap afresh from the API server (a write conflicted); the rosters that
        hold or select it take it too."""
        self._reads += 1
        with self._asking(shelves.CONFIGMAPS, namespace, {"metadata": {"name": name}}):
            body = await self.api.read_configmap(namespace=namespace, name=name)
            if body is not None:
                self._offer(shelves.CONFIGMAPS, namespace, body)
        return body

    def peers(self) -> tuple[conflicts.Peer, ...]:
        """Every EventHubConsumer the watch delivered, summed up; none before kopf hands the
        indexes over. One value, built again only after a CR event
        (`tracking.Tracking.observed`): at 1,000 consumers a pass over the index in every
        cycle was an eighth of the operator's CPU; the same value lets a settled decision
        compare its peers by identity, and keeps the lookups of `conflicts.PeerIndex`. A peer
        found deleted though kopf's index still holds it is left out (`relisting.Ghosts`)."""
        if self.seen.peers is None:
            index = self.seen.indexes.get(PEERS)
            if index is None:
                return ()
            gone = self.seen.gone
            self.seen.peers = conflicts.PeerIndex(
                peer for filed in index.values() for peer in filed if peer.uid not in gone
            )
        return self.seen.peers

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str:
        """The value kept since the last read, unless rejected or older than the refresh."""
        return await self._secrets.get(namespace=namespace, name=name, key=key)

    def forget_secret(self, *, namespace: str, name: str) -> None:
        self._secrets.forget(namespace=namespace, name=name)

    def forget_secrets(self, *, namespace: str) -> None:
        """Every value of ``namespace`` is read afresh at its next use (a consumer deleted)."""
        self._secrets.forget(namespace=namespace)

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
            shelves.pod_keys(namespace, shelves.meta(body).get("labels") or {})
            if kind == shelves.PODS
            else ()
        )
        name = str(shelves.meta(body).get("name") or "")
        for roster in self._rosters.candidates(kind, namespace, body, keys=keys):
            if wrote:
                before = roster.shelves[kind].items.get(name)
                taken = self._rosters.wrote(roster, kind, body, now=self.clock())
                if (
                    taken
                    and before is not None
                    and shelves.news(kind, before, body, touched=touched)
                ):
                    self.wake((roster.namespace, roster.name))
            else:
                self._rosters.offer(roster, kind, body)

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._asking(shelves.CONFIGMAPS, namespace, body):
            result = await self.api.create_configmap(namespace=namespace, body=body)
            self._offer(shelves.CONFIGMAPS, namespace, result, wrote=True)
        return result

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        with self._asking(shelves.CONFIGMAPS, namespace, {"metadata": {"name": name}}):
            result = await self.api.patch_configmap(
                namespace=namespace, name=name, patch=patch, resource_version=resource_version
            )
            touched = ((patch.get("metadata") or {}).get("annotations") or {}).keys()
            self._offer(shelves.CONFIGMAPS, namespace, result, wrote=True, touched=touched)
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
        with self._asking(shelves.CONFIGMAPS, namespace, {"metadata": {"name": name}}):
            result = await self.api.replace_configmap_data(
                namespace=namespace, name=name, uid=uid, generation=generation, data=data
            )
            self._offer(shelves.CONFIGMAPS, namespace, result, wrote=True)
        return result

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None:
        await self.api.delete_configmap(namespace=namespace, name=name, uid=uid)
        gone = {"metadata": {"name": name}}
        for roster in self._rosters.candidates(shelves.CONFIGMAPS, namespace, gone, keys=()):
            self._rosters.deleted(
                roster, shelves.CONFIGMAPS, name=name, uid=uid or "", now=self.clock()
            )

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Mapping[str, Any] | None:
        with self._asking(shelves.PODS, namespace, {"metadata": {"name": name}}):
            result = await self.api.patch_pod_annotations(
                namespace=namespace, name=name, annotations=annotations
            )
            if result is not None:
                self._offer(shelves.PODS, namespace, result, wrote=True)
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
        with roster.asking(shelves.CONSUMER) if roster is not None else contextlib.nullcontext():
            result = await self.api.patch_consumer_status(
                namespace=namespace, name=name, status=status, resource_version=resource_version
            )
            if roster is not None:
                before = roster.consumer
                if roster.wrote(shelves.CONSUMER, result, now=self.clock()) and (
                    before is not None and shelves.news(shelves.CONSUMER, before, result)
                ):
                    self.wake((namespace, name))
        return result

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        await self.api.create_event(namespace=namespace, body=body)
