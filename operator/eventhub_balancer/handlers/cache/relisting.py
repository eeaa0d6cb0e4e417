"""What a pod watch that lags has not delivered yet, found within `RELIST_SECONDS`; what the
ConfigMap watch lost in a gap, within `CONFIGMAP_RELIST_SECONDS`.

A watch that goes silent is noticed: kopf reconnects it (`kopfwiring.WATCH_INACTIVITY_SECONDS`).
A watch whose events come late is not, unless something tells: the operator's own writes do
for the CRs and the ConfigMaps (their echoes are due within `rosters.ECHO_SECONDS`), but the
operator never writes pods, and a pod deleted while nothing else happens gives no sign at all.
Behind a watch 65 s late, a deleted pod's partitions waited more than 100 s.

So every `RELIST_SECONDS` the operator lists the pods afresh, one LIST per namespace it has
consumers in, whatever their number, and offers each pod to the rosters that hold or select
it (`rosters.Rosters.relisted`): what the listing lacks and is no newer leaves, what it has
newer replaces the older body, and each consumer whose roster changed is woken. A pod
deleted or relabelled under a lagging watch leaves its consumer within that bound, and the
listing is also what tells a decision that a pod the record names is gone
(`observations.Departures`). The LIST asks only for the pods some consumer there may select
(`covering`): in a namespace shared with other workloads, their pods are neither sent nor
parsed every 10 s.

At every sixth turn (`CONFIGMAP_RELIST_SECONDS`), each namespace's managed ConfigMaps are
listed too (`Relisting.relist_configmaps`: the selector of their watch), and offered the same
way. kopf keeps in its index a ConfigMap deleted while its watch was away, and a re-list that
lists no ConfigMap at all sends no event, so an operator that stays active is told nothing:
its rosters held the ConfigMaps, a steady cycle wrote nothing, and the pods, which run no
partition without their ConfigMap, stayed idle for good. The listing drops such a ConfigMap
from its roster, and the consumer woken writes it again. They are listed before the pods of
that turn, so a ConfigMap found gone is settled by the pods listed next
(`rosters.Roster.vanished`), and the consumers are woken once both are in. A ConfigMap
deleted while its LIST is on its way stays deleted: by someone else (the DELETED is newer than
the answer, `rosters.Roster.asking`), or by the operator (the uid it deleted is never taken
back, `shelves.Shelf.remove`).

The cost, documented in docs/operator.md: one LIST of a namespace's pods per namespace and
`RELIST_SECONDS`, and one of its ConfigMaps per `CONFIGMAP_RELIST_SECONDS`, beside the cycles
(both counted in `Relisting.listings`); a steady cycle still makes no request. A failed
listing is tried again at the next turn, the rosters staying as they were; the log says a
refused listing once, not at every turn (`cyclefaults.ListingFaults`). When a namespace's
pods are listed again after such a refusal, its consumers are woken: their cycles, refused
too meanwhile, had backed off up to a minute, and a pod deleted during a throttle kept its
partitions that long after the API server answered again.

The other EventHubConsumers (the peers a consumer may yield to: `conflicts`) come from kopf's
index alone, and kopf drops an entry only on a DELETED event: a consumer deleted while the
watch was away (a replica paused for its peer, a 410) stays there for the life of the
process, and a newcomer at its location was refused as its junior forever. So at the same
turn, each consumer refused (``Conflict`` True) has the peer it yields to confirmed by one
GET (`Ghosts`): one the API server no longer has (404, or another uid under its name) is left
out of the peers from then on, and the refused consumer is woken. A peer that exists is read
again at most every `CONFIRM_SECONDS` while it still refuses someone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable

from eventhub_balancer import errors
from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import conditions, labelselectors
from eventhub_balancer.handlers import cyclefaults, ports
from eventhub_balancer.handlers.cache import rosters, seen, shelves
from eventhub_balancer.reconciling import conflicts

logger = logging.getLogger(__name__)

#: How often each namespace's pods are listed afresh: a pod watch that lags, however late,
#: holds a change back at most this long (plus the listing and a cycle).
RELIST_SECONDS = 10.0
#: How often each namespace's managed ConfigMaps are listed afresh (at every sixth turn): the
#: bound on a ConfigMap deleted in a watch gap that no re-list event tells (a pod without one
#: runs no partition). Slower than the pods: the echoes of the operator's own writes already
#: tell a ConfigMap stream that lags, such a deletion is rare, and each LIST carries every
#: managed ConfigMap of the namespace (one per pod).
CONFIGMAP_RELIST_SECONDS = 60.0
#: Every pod of a namespace: the rosters pick what their selectors match.
EVERY_POD = labelselectors.Selector()
#: The most values one ``key in (...)`` covering selector names; beyond, every pod is listed
#: (a query string stays a few KB long).
MAX_COVERED = 100
#: How long a peer the API server showed to exist is not read again while it refuses someone.
CONFIRM_SECONDS = 60.0

Key = tuple[str, str]


class Relisting:
    """The pods of every namespace with consumers, listed afresh every `RELIST_SECONDS`."""

    def __init__(
        self,
        api: ports.ListingPort,
        kept: rosters.Rosters,
        *,
        wake: Callable[[Key], None],
        seconds: float = RELIST_SECONDS,
        configmap_seconds: float = CONFIGMAP_RELIST_SECONDS,
        pod_scope: labelselectors.Selector | None = None,
        ghosts: Ghosts | None = None,
    ) -> None:
        self.api = api
        #: the peers refusing a consumer, confirmed at each turn
        self.ghosts = ghosts
        self.kept = kept
        #: the pods the operator watches at all (``--pod-selector``; None: every pod)
        self.pod_scope = pod_scope
        self.wake = wake
        self.seconds = seconds
        self.configmap_seconds = configmap_seconds
        #: LISTs made so far, of pods and ConfigMaps: what the relisting costs, counted apart
        #: from the cycles' (`ehb bench operator` leaves them out of a steady cycle's requests).
        self.listings = 0
        #: of those, the ConfigMaps' LISTs
        self.configmap_listings = 0
        #: the listings refused now, said once, not at every turn (`cyclefaults.ListingFaults`)
        self.faults = cyclefaults.ListingFaults(logger)
        #: per namespace with consumers, the turns left before its ConfigMaps are listed
        self._configmaps_due: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Relist from now on, if not yet (each daemon asks as it starts)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="ehb-relisting")

    def stop(self) -> None:
        """No more relisting (the last daemon stopped): a listing in flight is cancelled."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.seconds)
            await self.relist()
            if self.ghosts is not None:
                await self.ghosts.check()

    async def relist(self) -> list[Key]:
        """One turn: every namespace's pods, and its ConfigMaps when their turn comes (every
        `CONFIGMAP_RELIST_SECONDS`; a failed listing is tried again at the next turn); the
        consumers woken, once both listings of a namespace are in."""
        woken: list[Key] = []
        every = max(1, round(self.configmap_seconds / self.seconds))
        # Per namespace with consumers, the turns left before its ConfigMaps are listed: a
        # namespace's consumers list theirs when their daemons start, so it waits a whole one.
        due = {ns: self._configmaps_due.get(ns, every) - 1 for ns, _ in self.kept.by_key}
        self._configmaps_due = due
        for namespace in sorted(due):
            changed: list[Key] = []
            if due[namespace] <= 0:
                # First: the pods listed next are then as new as these, so a ConfigMap found
                # gone needs no listing of its pod of its own (`rosters.Roster.vanished`).
                what = f"ConfigMaps in {namespace}"
                try:
                    changed += await self.relist_configmaps(namespace)
                    due[namespace] = every
                    self.faults.succeeded(what, now=_now())
                except errors.EventHubBalancerError as e:
                    self.faults.failed(what, e, now=_now())
            what = f"pods in {namespace}"
            try:
                changed += await self.relist_namespace(namespace)
                if self.faults.succeeded(what, now=_now()):
                    # The API server answers again after refusing: the namespace's consumers
                    # try now, not at the end of a backoff that grew meanwhile (up to 60 s).
                    changed += [key for key in self.kept.by_key if key[0] == namespace]
            except errors.EventHubBalancerError as e:
                self.faults.failed(what, e, now=_now())
            for key in dict.fromkeys(changed):
                self.wake(key)
                woken.append(key)
        return woken

    async def relist_namespace(self, namespace: str) -> list[Key]:
        """List ``namespace``'s pods and offer them to its rosters; the consumers whose roster
        changed."""
        held = self._held(namespace)
        selector = covering([r.lookup for r in held]).both(self.pod_scope)
        changed = await self._relisted(
            namespace,
            shelves.PODS,
            held,
            lambda: self.api.list_selected_pods(namespace=namespace, selector=selector),
            keys=lambda body: shelves.pod_keys(
                namespace, (body.get("metadata") or {}).get("labels") or {}
            ),
        )
        if changed:
            logger.info(
                "%s: pods listed afresh showed what the pod watch had not delivered yet: %s",
                namespace,
                ", ".join(name for _, name in changed),
            )
        return changed

    async def relist_configmaps(self, namespace: str) -> list[Key]:
        """List the ConfigMaps the operator manages in ``namespace`` (the selector of its
        watch) and offer them to its rosters; the consumers whose roster changed."""
        self.configmap_listings += 1
        changed = await self._relisted(
            namespace,
            shelves.CONFIGMAPS,
            self._held(namespace),
            lambda: self.api.list_managed_configmaps(namespace=namespace),
            keys=lambda body: (),
        )
        if changed:
            logger.info(
                "%s: ConfigMaps listed afresh showed what the ConfigMap watch had not "
                "delivered (deleted while it was away?): %s",
                namespace,
                ", ".join(name for _, name in changed),
            )
        return changed

    def _held(self, namespace: str) -> list[rosters.Roster]:
        return [r for (ns, _), r in self.kept.by_key.items() if ns == namespace]

    async def _relisted(
        self,
        namespace: str,
        kind: str,
        held: list[rosters.Roster],
        ask: Callable[[], Awaitable[listings.Listing]],
        *,
        keys: Callable[[shelves.Body], Iterable[Hashable]],
    ) -> list[Key]:
        """One LIST of ``kind`` in ``namespace``, offered to the rosters ``held`` when it was
        asked (`rosters.Rosters.relisted`): while it is on its way, each keeps what it removed
        meanwhile removed (`rosters.Roster.asking`)."""
        asked = {(r.namespace, r.name): r.shelves[kind] for r in held}
        with contextlib.ExitStack() as asking:
            for roster in held:
                asking.enter_context(roster.asking(kind))
            self.listings += 1
            listing = await ask()
            return self.kept.relisted(
                namespace,
                kind,
                listing.items,
                at=shelves.number(listing.metadata.get("resourceVersion")),
                keys=keys,
                asked=asked,
            )


def _now() -> float:
    return asyncio.get_running_loop().time()


def covering(lookups: Iterable[Hashable]) -> labelselectors.Selector:
    """One selector that matches every pod the rosters of one namespace may select, given each
    one's lookup key (`shelves.pod_lookup`: a label its selector requires, or the namespace
    alone): ``key in (their values)`` when they all require a value of the same label key,
    else every pod. A pod a roster holds matches its selector, so it matches this one: what
    the listing lacks has left every roster that held it."""
    values: set[str] = set()
    keys: set[str] = set()
    for lookup in lookups:
        if lookup is None:
            continue  # a consumer without a selector holds no pods
        if not isinstance(lookup, tuple) or len(lookup) != 3:
            return EVERY_POD
        _namespace, key, value = lookup
        keys.add(key)
        values.add(value)
    if len(keys) != 1 or len(values) > MAX_COVERED:
        return EVERY_POD
    [key] = keys
    requirement = labelselectors.LabelRequirement(
        key=key, operator="In", values=tuple(sorted(values))
    )
    return labelselectors.Selector(match_expressions=(requirement,))


class Ghosts:
    """The peers kopf's index still holds after they were deleted, found when they refuse a
    consumer: each refused consumer's holder is read once (`confirm`), and one the API server
    no longer has is left out of the peers (``seen.Seen.gone``)."""

    def __init__(
        self,
        api: ports.ApiPort,
        shared: seen.Seen,
        *,
        peers: Callable[[], tuple[conflicts.Peer, ...]],
        wake: Callable[[Key], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.seen = shared
        #: the peers as the cycles read them (`serving.CachedKube.peers`): without the gone
        self.peers = peers
        self.wake = wake
        self.clock = clock
        #: uid -> when the API server last showed that peer to exist
        self.confirmed: dict[str, float] = {}
        #: GETs made so far: what the confirmation costs
        self.reads = 0

    async def check(self) -> list[Key]:
        """Confirm the peer each refused consumer yields to; the consumers woken (those whose
        holder turned out gone)."""
        now = self.clock()
        self.confirmed = {u: t for u, t in self.confirmed.items() if now - t < CONFIRM_SECONDS}
        index = self.seen.indexes.get(shelves.PEERS) or {}
        # What kopf's index no longer holds needs leaving out no more.
        self.seen.gone &= {peer.uid for filed in index.values() for peer in filed}
        woken: list[Key] = []
        for roster in list(self.seen.rosters.by_key.values()):
            holder = self.holder(roster)
            if holder is None or not holder.uid or holder.uid in self.confirmed:
                continue
            try:
                gone = await self.confirm(holder, now=now)
            except errors.EventHubBalancerError as e:
                logger.warning("%s was not confirmed: %s", holder.named, e)
                continue
            if gone:
                woken.append((roster.namespace, roster.name))
        for key in woken:
            self.wake(key)
        return woken

    def holder(self, roster: rosters.Roster) -> conflicts.Peer | None:
        """The peer ``roster``'s consumer yields to, when its status says it is refused."""
        body = roster.consumer
        if body is None:
            return None
        found = conditions.find((body.get("status") or {}).get("conditions"), conflicts.CONFLICT)
        if found is None or found.get("status") != "True":
            return None
        me = conflicts.peer(body, namespace=roster.namespace, name=roster.name)
        labels = (
            conflicts.pod_labels(roster.items(shelves.PODS), selector=me.selector)
            if me.selector is not None
            else []
        )
        overlap = conflicts.find(me, self.peers(), pod_labels=labels)
        return overlap.others[0] if overlap is not None and overlap.others else None

    async def confirm(self, peer: conflicts.Peer, *, now: float) -> bool:
        """Read ``peer`` from the API server; whether it was gone (and is left out now)."""
        self.reads += 1
        try:
            body = await self.api.get_consumer(namespace=peer.namespace, name=peer.name)
        except errors.NotFound:
            body = None
        uid = str(shelves.meta(body).get("uid") or "") if body is not None else ""
        if body is not None and uid == peer.uid:
            self.confirmed[peer.uid] = now
            return False
        logger.info(
            "%s was deleted while the watch was away (kopf's index still held it): "
            "it refuses nobody any more",
            peer.named,
        )
        self.seen.gone.add(peer.uid)
        self.seen.peers = None
        return True
