"""What the operator asks Event Hubs and the checkpoint store: partition ids, epochs, lag.

The facade the handlers reach through `handlers.ports.HubPort`, in plain types. Each job is a
module of its own, and every call passes one gate before any client exists:

- `admissions`: whether the consumer may use these credentials, this endpoint and this
  identity (the tenant and endpoint checks, in one place);
- `hubclients`: the hubs' clients, kept open between cycles, and their management calls;
- `partitionlists`: each consumer's partition ids, kept between cycles;
- `checkpointlistings`: the checkpoint blobs' epochs and positions.

The names callers know from here (`Coordinates`, `IdentityPolicy`, `producer`, the
constants) stay importable from this module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    admissions,
    callgates,
    checkpointlistings,
    consumergroups,
    hubclients,
    keptclients,
    partitionlists,
    tenantidentities,
)
from eventhub_balancer.contracts import endpoints, startpositions, storeaddresses

T = TypeVar("T")

# The names this module has always offered, kept for its callers (the CLI, the devstack).
REFRESH_SECONDS = partitionlists.REFRESH_SECONDS
TIMEOUT_SECONDS = hubclients.TIMEOUT_SECONDS
CONCURRENT_CALLS = hubclients.CONCURRENT_CALLS
DEFAULT_ENDPOINTS = admissions.DEFAULT_ENDPOINTS
ANY_NAMESPACE = admissions.ANY_NAMESPACE
IdentityPolicy = admissions.IdentityPolicy
Coordinates = hubclients.Coordinates
Clients = hubclients.Clients
producer = hubclients.producer
fetch_partition_ids = hubclients.fetch_partition_ids
fetch_last_sequence_numbers = hubclients.fetch_last_sequence_numbers
PartitionCache = partitionlists.PartitionCache
PartitionList = partitionlists.PartitionList
StoredCheckpoint = checkpointlistings.StoredCheckpoint
checkpoint_containers = checkpointlistings.checkpoint_containers
read_checkpoints = checkpointlistings.read_checkpoints


class EventHubs:
    """The Event Hubs and checkpoint-store side of the operator, in plain types.

    The handlers reach it through a Protocol (`handlers.ports.HubPort`), so everything they
    see is built-in types: ids as tuples, checkpoints as ``{partition: (epoch, sequence)}``.
    """

    def __init__(
        self,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        timeout: float = TIMEOUT_SECONDS,
        endpoint_policy: endpoints.EndpointPolicy = DEFAULT_ENDPOINTS,
        identity_policy: admissions.IdentityPolicy = ANY_NAMESPACE,
        tenant_identities: tenantidentities.TenantIdentities | None = None,
        concurrent_calls: int = CONCURRENT_CALLS,
    ) -> None:
        #: one turn per call in flight, shared by every consumer (`CONCURRENT_CALLS`), and
        #: fairly between tenants (namespaces): one tenant's slow Azure never takes them all
        self.gate = callgates.FairGate(concurrent_calls)
        #: the Event Hubs clients and checkpoint containers kept open between cycles
        self.clients = hubclients.Clients()
        self.containers = checkpointlistings.checkpoint_containers()
        #: which consumer lists its checkpoints over which kept container
        self.container_users = keptclients.Users(self.containers.release)
        self.cache = partitionlists.PartitionCache(
            refresh_seconds=refresh_seconds, timeout=timeout, gate=self.gate, clients=self.clients
        )
        self.timeout = timeout
        #: whether each consumer's group exists, asked with its partition listing
        self.groups = consumergroups.ConsumerGroups(timeout=timeout)
        #: what every call passes before any client exists
        self.admission = admissions.Admission(
            endpoints=endpoint_policy,
            identities=identity_policy,
            tenant_identities=tenant_identities,
        )

    async def _admitted(
        self,
        service: admissions.Service,
        call: Callable[[tenantidentities.TenantIdentity | None], Awaitable[T]],
        *,
        namespace: str | None,
        connection_string: str | None,
        service_account: str | None,
        fully_qualified_namespace: str = "",
        account_url: str | None = None,
        consumer: str | None = None,
    ) -> T:
        """``call`` as the identity `admissions.Admission.admit` hands out; a rejected one is
        looked up afresh next time. A refused admission drops what is kept for ``consumer``
        (`refused`)."""
        try:
            identity = await self.admission.admit(
                service,
                namespace=namespace,
                connection_string=connection_string,
                service_account=service_account,
                fully_qualified_namespace=fully_qualified_namespace,
                account_url=account_url,
            )
        except errors.ConfigurationError as e:
            self.refused(e, consumer)
            raise
        try:
            return await call(identity)
        except errors.EventHubBalancerError as e:
            self.admission.rejected(identity, e)
            raise

    async def close(self) -> None:
        """Close the kept clients (the operator stops)."""
        await self.clients.close()
        await self.containers.close()

    def forget(self, consumer: str) -> None:
        # Its hub's client and its checkpoint container, if no other consumer uses them,
        # close, and with them the credentials they hold.
        self.cache.forget(consumer)
        self.container_users.forget(consumer)
        self.groups.forget(consumer)

    def refused(self, error: errors.ConfigurationError, consumer: str | None) -> None:
        """Admission refused ``consumer``: its cached list goes, so that the growth watch,
        which lists a hub with the coordinates of its last admitted read and is never
        admitted again, no longer lists as it (its credentials, its endpoint, its identity).
        A ServiceAccount that no longer lends its identity takes every consumer that acts as
        it along, not only the one whose cycle found out. Transient errors keep the list."""
        if consumer is not None:
            self.forget(consumer)
        if isinstance(error, errors.TenantIdentityUnavailable):
            for other in self.cache.acting_as(
                namespace=error.namespace, service_account=error.service_account
            ):
                self.forget(other)

    def cached(self, consumer: str) -> tuple[str, ...] | None:
        entry = self.cache.cached(consumer)
        return entry.ids if entry else None

    def hubs(self) -> list[Hashable]:
        return self.cache.hubs()

    def consumers(self, hub: Hashable) -> dict[str, tuple[str, ...]]:
        return self.cache.consumers(hub)

    async def list_hub(self, hub: Hashable) -> tuple[str, ...] | None:
        return await self.cache.list_hub(hub)

    def grow(self, consumer: str, hub: Hashable, ids: tuple[str, ...]) -> bool:
        return self.cache.grow(consumer, hub, ids)

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
        """(ids, fresh): fresh is False when served from the cache. ``namespace``: the
        Kubernetes namespace of the consumer that asks (`admissions.IdentityPolicy`);
        ``service_account``: its spec.serviceAccountName, whose identity is used instead of
        the operator's; ``consumer_group``: checked to exist with a fresh listing
        (`consumergroups`), raising `errors.ConsumerGroupNotFound` with the ids cached."""

        async def listed(
            identity: tenantidentities.TenantIdentity | None,
        ) -> partitionlists.PartitionList:
            coordinates = hubclients.Coordinates(
                fully_qualified_namespace=fully_qualified_namespace,
                eventhub_name=eventhub_name,
                connection_string=connection_string,
                workload_identity_client_id=client_id,
                identity=identity,
            )
            found = await self.cache.partition_ids(consumer, coordinates, now=now, tenant=namespace)
            if consumer_group is not None:
                async with self.gate.turn(namespace):
                    await self.groups.check(
                        consumer, coordinates, consumer_group, found.ids, fresh=found.fresh
                    )
            return found

        result = await self._admitted(
            admissions.Service.EVENTHUB,
            listed,
            namespace=namespace,
            connection_string=connection_string,
            service_account=service_account,
            fully_qualified_namespace=fully_qualified_namespace,
            consumer=consumer,
        )
        return result.ids, result.fresh

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
        async def ends(
            identity: tenantidentities.TenantIdentity | None,
        ) -> dict[str, startpositions.PartitionBounds]:
            coordinates = hubclients.Coordinates(
                fully_qualified_namespace=fully_qualified_namespace,
                eventhub_name=eventhub_name,
                connection_string=connection_string,
                workload_identity_client_id=client_id,
                identity=identity,
            )
            async with self.gate.turn(namespace):
                return await hubclients.fetch_last_sequence_numbers(
                    coordinates, partitions, limit_seconds=self.timeout, clients=self.clients
                )

        return await self._admitted(
            admissions.Service.EVENTHUB,
            ends,
            namespace=namespace,
            connection_string=connection_string,
            service_account=service_account,
            fully_qualified_namespace=fully_qualified_namespace,
        )

    async def checkpoints(self, address: storeaddresses.StoreAddress) -> dict[str, tuple[int, int]]:
        """{partition: (epoch, sequence number)} of the stored checkpoints.
        ``address.consumer``: who asks, so that the container client it leaves (its Secret
        rotated, or it is deleted: `forget`) is closed once nobody else uses it."""
        stored = await self._in_container(checkpointlistings.read_checkpoints, address)
        return {p: (c.epoch, c.sequence_number) for p, c in stored.items()}

    async def ownership_claims(self, address: storeaddresses.StoreAddress) -> dict[str, str]:
        """{partition: ETag} of the SDK's ownership blobs beside the checkpoints: one listing
        of their names over the same container client as `checkpoints`."""
        return await self._in_container(checkpointlistings.read_claims, address)

    async def _in_container(
        self,
        read: Callable[..., Awaitable[T]],
        address: storeaddresses.StoreAddress,
    ) -> T:
        """``read`` (a `checkpointlistings` reader) over the kept checkpoint container, once
        admitted."""

        async def listed(identity: tenantidentities.TenantIdentity | None) -> T:
            if address.consumer is not None:
                self.container_users.use(
                    address.consumer, checkpointlistings.container_key(address, identity)
                )
            async with self.gate.turn(address.consumer_namespace):
                return await read(address, identity=identity, containers=self.containers)

        return await self._admitted(
            admissions.Service.CHECKPOINTS,
            listed,
            namespace=address.consumer_namespace,
            connection_string=address.connection_string,
            service_account=address.service_account,
            account_url=address.account_url,
        )
