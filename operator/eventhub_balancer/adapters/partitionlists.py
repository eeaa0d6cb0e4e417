"""Each consumer's partition ids, kept between cycles and listed again when they are old.

The operator needs the partition ids of each consumer's Event Hub every cycle. Asking Event
Hubs every few seconds would open an AMQP connection per cycle, so ids are cached per consumer
and refreshed at least every `REFRESH_SECONDS` (partition counts can grow, never shrink). A
failure raises; the caller keeps the last good list (never revoke everything because Event
Hubs is briefly unreachable). Between refreshes the operator's growth watch
(`handlers.growth`) lists each hub four times a second, once for all the consumers that share
it, and hands a longer list to each of them (`PartitionCache.grow`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Hashable

from eventhub_balancer.adapters import callgates, hubclients, keptclients

#: The partition list is re-read at least this often: docs/operator.md's "at least every 60 s".
REFRESH_SECONDS = 60.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionList:
    """Partition ids and whether they came fresh from Event Hubs in this call."""

    ids: tuple[str, ...]
    fetched_at: float  # the caller's clock (seconds)
    fresh: bool


class PartitionCache:
    """Partition ids per consumer, re-read when older than `REFRESH_SECONDS` or the hub changed.

    Each entry keeps the `hubclients.Coordinates` it was listed with (in memory only: their
    repr leaves the connection string out), so that the operator's growth watch
    (`handlers.growth`) can list a hub again between refreshes: once per hub (their ``key``),
    however many consumers share it, and hand a longer list to each of them (`grow`).
    """

    def __init__(
        self,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        timeout: float = hubclients.TIMEOUT_SECONDS,
        gate: callgates.FairGate | None = None,
        clients: hubclients.Clients | None = None,
    ) -> None:
        self.refresh_seconds = refresh_seconds
        #: the kept clients the listings go through; None: a client per listing
        self.clients = clients
        self.timeout = timeout
        #: the turns of the calls in flight (`CONCURRENT_CALLS`), shared by tenants
        self.gate = gate or callgates.FairGate(hubclients.CONCURRENT_CALLS)
        self._entries: dict[str, tuple[hubclients.Coordinates, PartitionList]] = {}
        #: the tenant each consumer's listings take their turns as (`callgates`)
        self._tenants: dict[str, Hashable] = {}
        #: the consumers of each hub (`hubclients.Coordinates.key`): the last one to leave a
        #: hub releases its kept client, which holds its credentials (a rotated-out key, a
        #: deleted consumer's Secret)
        self._consumers = keptclients.Users(clients.release if clients is not None else None)
        #: the consumers whose list `grow` lengthened since their last read
        self._grown: set[str] = set()

    def cached(self, consumer: str) -> PartitionList | None:
        entry = self._entries.get(consumer)
        return entry[1] if entry else None

    def forget(self, consumer: str) -> Awaitable[None] | None:
        """Drop ``consumer``'s list; the close of its hub's client, if it was the last
        consumer of that hub and credentials (under way: await it to wait for it)."""
        self._entries.pop(consumer, None)
        self._tenants.pop(consumer, None)
        self._grown.discard(consumer)
        return self._consumers.forget(consumer)

    async def partition_ids(
        self,
        consumer: str,
        coordinates: hubclients.Coordinates,
        *,
        now: float,
        force: bool = False,
        tenant: Hashable = None,
    ) -> PartitionList:
        """The cached list while young and for the same hub; else a fresh one (or it raises).
        A list the growth watch lengthened (`grow`) is served fresh once. ``tenant``: whose
        turns at the gate the listing takes, and the growth watch's of this hub after it."""
        entry = self._entries.get(consumer)
        if (
            entry is not None
            and not force
            and entry[0].key == coordinates.key
            and self._young(entry[1], now)
        ):
            grown = consumer in self._grown
            self._grown.discard(consumer)
            return dataclasses.replace(entry[1], fresh=grown)
        async with self.gate.turn(tenant):
            ids = await hubclients.fetch_partition_ids(
                coordinates, limit_seconds=self.timeout, clients=self.clients
            )
        result = PartitionList(ids=tuple(ids), fetched_at=now, fresh=True)
        self._entries[consumer] = (coordinates, result)
        self._tenants[consumer] = tenant
        released = self._consumers.use(consumer, coordinates.key)
        self._grown.discard(consumer)
        if released is not None:
            # Shielded: a cycle cancelled meanwhile leaves the close to finish on its own.
            await asyncio.shield(released)
        return result

    def _young(self, listed: PartitionList, now: float) -> bool:
        # ``now`` is the cycle's wall clock, which NTP may step back: a negative age is not
        # young, or the list would not be read again until the clock caught up (an hour
        # stepped back: an hour without a refresh).
        return 0.0 <= now - listed.fetched_at < self.refresh_seconds

    def acting_as(self, *, namespace: str, service_account: str) -> list[str]:
        """The consumers whose cached list was read as that ServiceAccount's identity."""
        return [
            consumer
            for consumer, (coordinates, _listed) in self._entries.items()
            if coordinates.identity is not None
            and coordinates.identity.namespace == namespace
            and coordinates.identity.service_account == service_account
        ]

    def hubs(self) -> list[Hashable]:
        """Every hub a cached list came from, once (its coordinates' ``key``: no secret in
        it)."""
        return self._consumers.keys()

    def consumers(self, hub: Hashable) -> dict[str, tuple[str, ...]]:
        """The cached list of each consumer of ``hub``."""
        return {consumer: self._entries[consumer][1].ids for consumer in self._consumers.users(hub)}

    async def list_hub(self, hub: Hashable) -> tuple[str, ...] | None:
        """``hub``'s partition ids, listed now with its consumers' credentials (raises wrapped
        errors only); None: no consumer of it is cached any more. The cache is left as it
        is: `grow` hands a longer list on. It takes its turn as the tenant of the hub's
        first consumer: a slow tenant's hubs wait on that tenant's turns."""
        first = next(iter(self._consumers.users(hub)), None)
        async with self.gate.turn(self._tenants.get(first) if first is not None else None):
            # Looked up once the turn is taken, not before: a consumer forgotten meanwhile
            # (deleted, or its Secret rotated to another key) released the hub's client, and a
            # listing with its coordinates would build one that nobody releases again.
            consumers = self._consumers.users(hub)
            if not consumers:
                return None
            coordinates = self._entries[consumers[0]][0]
            ids = await hubclients.fetch_partition_ids(
                coordinates, limit_seconds=self.timeout, clients=self.clients
            )
        return tuple(ids)

    def grow(self, consumer: str, hub: Hashable, ids: tuple[str, ...]) -> bool:
        """Take ``ids`` as ``consumer``'s list, served fresh at its next read, if its list is
        still of ``hub`` and shorter: partition counts only grow, and a list never goes
        backwards. Its age stays (the refresh still comes when it is due). Whether it did."""
        entry = self._entries.get(consumer)
        if entry is None or entry[0].key != hub or len(ids) <= len(entry[1].ids):
            return False
        self._entries[consumer] = (entry[0], dataclasses.replace(entry[1], ids=tuple(ids)))
        self._grown.add(consumer)
        return True
