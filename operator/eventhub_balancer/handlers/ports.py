"""What the handlers need from the outside world, as Protocols.

The adapters are built by the entry points (``ehb operator``, the benchmarks, the tests) and
handed in, so that a cycle runs against in-memory fakes in unit tests
(``tests/support/fakes.py``) and against a second operator's own clients in peering tests.
The reads a cycle makes every time (the CR, its pods, its ConfigMaps, Secrets) are served from
the watch streams by `cache.serving.CachedKube`, which satisfies `KubePort` over the adapter; the
watch handlers hand events in through `WatchPort` and the daemons keep their rosters through
`RosterPort` (`cache.tracking.Tracking`, `cache.tracking.Following`).
These Protocols are the seams: ``adapters.kubeapi.KubeAPI`` and ``adapters.eventhubs.EventHubs``
satisfy them. Errors cross the seam as `eventhub_balancer.errors` types, whose ``reason`` the
handlers show.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Protocol

from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import specs, startpositions, storeaddresses
from eventhub_balancer.reconciling import conflicts, observations

#: (namespace, name) of an EventHubConsumer
Key = tuple[str, str]


class WatchPort(Protocol):
    """Change tracking: the watch handlers hand in every event; out come the consumers to
    wake."""

    def observed(self, kind: str, event_type: str | None) -> bool:
        """An event of the watch of ``kind`` (None: a listing); whether it starts a re-list."""

    def event(self, kind: str, body: Mapping[str, Any], event_type: str | None) -> list[Key]:
        """The consumers whose view ``body`` changed."""


class RosterPort(Protocol):
    """The daemons' side: one roster per running consumer, started from kopf's indexes."""

    def attach(self, indexes: Mapping[str, Mapping[Any, Iterable[Any]]]) -> None: ...

    def follow(self, *, namespace: str, name: str, selector: specs.Selector | None) -> None:
        """Before each cycle: start or keep the roster for ``selector``."""

    def refresh(self, *, namespace: str, name: str) -> None:
        """A write was refused for a stale read: read the consumer afresh next cycle."""

    def forget(self, *, namespace: str, name: str) -> None: ...

    def following(self) -> list[Key]: ...


class ApiPort(Protocol):
    """The Kubernetes API as the cycle uses it: reads and writes, each a request."""

    writes: dict[str, int]

    async def get_consumer(self, *, namespace: str, name: str) -> specs.ConsumerBody: ...

    async def select_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> list[Mapping[str, Any]]: ...

    async def consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> list[Mapping[str, Any]]: ...

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str: ...

    async def read_configmap(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        """One ConfigMap as the API server has it now (None: gone), after a write conflicted."""

    async def create_configmap(
        self, *, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]: ...

    async def replace_configmap_data(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        generation: str,
        data: Mapping[str, str],
    ) -> dict[str, Any]:
        """Replace the data of the ConfigMap ``uid`` whose data ``generation`` is still the
        one given (Conflict otherwise), whatever its annotations did meanwhile."""
        ...

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None: ...

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Mapping[str, Any] | None: ...

    async def patch_consumer_status(
        self,
        *,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> specs.ConsumerBody:
        """Merge-patch the status; with ``resource_version`` it fails (`errors.Conflict`)
        unless the CR is still at that version."""

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None: ...


class KubePort(ApiPort, Protocol):
    """What a cycle reads and writes through: the API, with what a cache in front of it
    knows (`cache.serving.CachedKube`; a port without a cache answers for the bare API)."""

    def stamp(self, *, namespace: str, name: str) -> Hashable | None:
        """What changes whenever the pods or ConfigMaps the consumer's cycle reads may have
        changed; None: no watch tells (a cycle then never skips a decision)."""

    def peers(self) -> tuple[conflicts.Peer, ...]:
        """Every EventHubConsumer the operator sees, summed up; empty: none known (a port
        without a watch of them finds no conflict)."""

    def forget_secret(self, *, namespace: str, name: str) -> None:
        """Read the Secret afresh next time: what it held was rejected (or failed)."""

    def departures(self, *, namespace: str, name: str) -> observations.Departures:
        """What the consumer's pods as last read say of the pods they lack (whether each is
        known to be gone); `observations.UNCACHED` when every read goes to the API server."""

    def forget_pods(self, *, namespace: str, name: str) -> None:
        """List the consumer's pods afresh at their next read."""


class ListingPort(ApiPort, Protocol):
    """What the cache needs of the adapter beyond `ApiPort`: listings with their version."""

    async def list_selected_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> listings.Listing: ...

    async def list_consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> listings.Listing: ...

    async def list_managed_configmaps(self, *, namespace: str) -> listings.Listing:
        """Every ConfigMap the operator manages in ``namespace`` (what its watch selects)."""


class HubPort(Protocol):
    """Event Hubs and the checkpoint store. ``namespace`` is the Kubernetes namespace of the
    consumer that asks, ``service_account`` its spec.serviceAccountName: the identity used for
    ``workloadIdentity`` credentials (none: the operator's, where an admin lends it). The
    store's reads get both, with the blobs' whereabouts, in one `storeaddresses.StoreAddress`."""

    def cached(self, consumer: str) -> tuple[str, ...] | None: ...

    async def close(self) -> None:
        """Close what is kept open between cycles (the operator stops)."""

    def forget(self, consumer: str) -> None:
        """The consumer's daemon stopped: drop what is kept for it (its partition list)."""

    def hubs(self) -> list[Hashable]:
        """Every hub a cached partition list came from, once, as an opaque key (its
        namespace, name and credentials: consumers that share it share one listing). No
        secret is in it."""

    def consumers(self, hub: Hashable) -> dict[str, tuple[str, ...]]:
        """The cached partition list of each consumer of ``hub``."""

    async def list_hub(self, hub: Hashable) -> tuple[str, ...] | None:
        """``hub``'s partition ids, listed now, the cache left as it is (raises
        `errors.EventHubBalancerError`); None: no consumer of it is cached any more."""

    def grow(self, consumer: str, hub: Hashable, ids: tuple[str, ...]) -> bool:
        """``ids`` become ``consumer``'s cached list (fresh at its next read) if that list is
        still of ``hub`` and shorter; whether they did. A list never goes backwards."""

    async def partitions(
        self,
        *,
        consumer: str,
        fully_qualified_namespace: str,
        eventhub_name: str,
        connection_string: str | None,
        client_id: str | None,
        now: float,
        namespace: str | None = None,
        service_account: str | None = None,
        consumer_group: str | None = None,
    ) -> tuple[tuple[str, ...], bool]:
        """(ids, fresh); with ``consumer_group``, raises `errors.ConsumerGroupNotFound` (the
        ids kept for `cached`) when Event Hubs has no such group."""

    async def last_sequence_numbers(
        self,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        connection_string: str | None,
        client_id: str | None,
        partitions: list[str],
        namespace: str | None = None,
        service_account: str | None = None,
    ) -> dict[str, startpositions.PartitionBounds]:
        """The last enqueued sequence number per partition, with where the events it still
        holds begin (`startpositions.PartitionBounds.waiting_after`)."""

    async def checkpoints(self, address: storeaddresses.StoreAddress) -> dict[str, tuple[int, int]]:
        """{partition: (epoch, sequence number)} of the checkpoint blobs at ``address``."""

    async def ownership_claims(self, address: storeaddresses.StoreAddress) -> dict[str, str]:
        """{partition: ETag} of the SDK's ownership blobs beside the checkpoints."""
