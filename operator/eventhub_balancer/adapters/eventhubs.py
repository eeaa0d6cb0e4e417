"""What the operator asks Event Hubs and the checkpoint store: partition ids, epochs, lag.

The operator needs the partition ids of each consumer's Event Hub every cycle. Asking Event
Hubs every few seconds would open an AMQP connection per cycle, so ids are cached per consumer
and refreshed at least every `REFRESH_SECONDS` (partition counts can grow, never shrink). A
failure raises; the caller keeps the last good list (never revoke everything because Event
Hubs is briefly unreachable). Between refreshes the operator's growth watch
(`handlers.growth`) lists each hub four times a second, once for all the consumers that share
it, and hands a longer list to each of them (`PartitionCache.grow`).

The checkpoint blobs are read here too, for two reasons: their epochs are the last floor for
epochs when ConfigMaps and status were lost, and their sequence numbers give the lag per
partition for ``weighting: lag``.

Credentials come in as values (a connection string read from a Secret by the caller) or as
workload identity; they are never logged, and error messages describe the namespace, not the
string. Workload identity is the consumer's own when its spec names a ServiceAccount
(``spec.serviceAccountName``: `tenantidentities`, a token of that ServiceAccount exchanged for
its client id's identity), else the operator's own (DefaultAzureCredential), which is lent
only to the Kubernetes namespaces the install lists (`IdentityPolicy`), so that a tenant
cannot name another tenant's hub or store and read its partitions or epochs through it. Both
checks, and the endpoint check, come before any client exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fnmatch
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

from azure.core import exceptions as azure_errors
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub.aio import EventHubProducerClient
from azure.storage.blob.aio import ContainerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    amqphandshakes,
    blobs,
    checkpointing,
    keptclients,
    retrying,
    tenantidentities,
    tlscontexts,
)
from eventhub_balancer.contracts import endpoints

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The partition list is re-read at least this often: docs/operator.md's "at least every 60 s".
REFRESH_SECONDS = 60.0
#: The longest one management call may take before Event Hubs counts as unreachable.
TIMEOUT_SECONDS = 10.0
#: Calls to Event Hubs and the checkpoint stores in flight at once, per operator. Each opens a
#: connection: a thousand consumers starting together would otherwise open a thousand at
#: once, and those queued behind a server's accept backlog (or the operator's own CPU) ran
#: out of their `TIMEOUT_SECONDS` before they were served, so none of them converged. The time
#: a call waits for its turn does not count against its timeout.
CONCURRENT_CALLS = 32
#: Event Hubs clients the operator keeps open between cycles (`Clients`): one per hub and
#: credentials, each one connection.
CLIENTS_KEPT = 2048
#: Partition properties requested at once on one connection (a hub's ends, for the backlog).
PROPERTIES_AT_ONCE = 16
#: Where credentials may go when the caller says nothing: the public cloud, and the local
#: emulators on loopback (tests, the local stack). ``ehb operator`` always passes the policy
#: of its flags, whose default allows no development endpoint.
DEFAULT_ENDPOINTS = endpoints.EndpointPolicy(allow_development=True)
#: The spec fields a refusal of the operator's identity names.
EVENTHUB_CREDENTIALS = "spec.eventHub.credentials"
CHECKPOINT_CREDENTIALS = "spec.checkpointStore.credentials"
#: The checkpoint store's budget for one listing in a cycle: short, the next cycle retries.
CHECKPOINT_RETRY = retrying.RetryPolicy(attempts=2, budget_seconds=5.0, attempt_timeout_seconds=4.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdentityPolicy:
    """The Kubernetes namespaces whose consumers may use the operator's own Azure identity
    (``ehb operator --identity-namespace``, glob patterns as for ``--namespace``)."""

    #: None: every namespace (tests and the local stack, where the identity is nobody's);
    #: ``ehb operator`` always passes its list, by default empty: none
    namespaces: tuple[str, ...] | None = None

    def allows(self, namespace: str | None) -> bool:
        if self.namespaces is None:
            return True
        if not namespace:
            return False  # nobody says who asks: never lend the identity
        return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in self.namespaces)

    def check(
        self,
        *,
        namespace: str | None,
        field: str,
        connection_string: str | None,
        service_account: str | None = None,
    ) -> None:
        """Raise `errors.IdentityNotAllowed` when a consumer of ``namespace`` would use the
        operator's identity (no connection string and no ServiceAccount of its own) and may
        not."""
        if connection_string is None and not service_account and not self.allows(namespace):
            raise errors.IdentityNotAllowed(field=field, namespace=namespace or "")


#: Every namespace may use the operator's identity: what the tests and the local stack get.
ANY_NAMESPACE = IdentityPolicy()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Coordinates:
    """Where an Event Hub is and how to reach it; exactly one of the credentials is set."""

    fully_qualified_namespace: str
    eventhub_name: str
    connection_string: str | None = dataclasses.field(default=None, repr=False)
    workload_identity_client_id: str | None = None
    #: the consumer's own identity (spec.serviceAccountName); None: the operator's
    identity: tenantidentities.TenantIdentity | None = None

    @property
    def key(self) -> tuple[object, ...]:
        # The string itself is not kept in the key, only whether it changed (its hash).
        return (
            self.fully_qualified_namespace,
            self.eventhub_name,
            hash(self.connection_string),
            self.workload_identity_client_id,
            self.identity.key if self.identity is not None else None,
        )


def _entity_path(connection_string: str) -> str | None:
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "entitypath" and value.strip():
            return value.strip()
    return None


def _open(coordinates: Coordinates) -> tuple[EventHubProducerClient, Any]:
    """A new producer client for ``coordinates`` (and its credential, None for a connection
    string), its credentials checked against the hub's name. It connects on its first call.

    ``retry_total=0``: the caller is the retry loop (the operator's cycle, with its own
    backoff and cached fallback; a replay, with its own time limit)."""
    options: dict[str, Any] = {"retry_total": 0, "ssl_context": tlscontexts.eventhub_context()}
    credential: Any = None
    if coordinates.connection_string is not None:
        entity = _entity_path(coordinates.connection_string)
        if entity is not None and entity != coordinates.eventhub_name:
            raise errors.ConfigurationError(
                f"the connection string is for Event Hub {entity!r} but spec.eventHub.name is "
                f"{coordinates.eventhub_name!r}: make them agree"
            )
        try:
            client = EventHubProducerClient.from_connection_string(
                coordinates.connection_string,
                eventhub_name=None if entity else coordinates.eventhub_name,
                **options,
            )
        except (ValueError, TypeError) as e:
            # The SDK's message does not echo the string; ours must not either.
            raise errors.ConfigurationError(
                f"the Event Hubs connection string is malformed ({type(e).__name__}): it should "
                "look like Endpoint=sb://<namespace>/;SharedAccessKeyName=...;SharedAccessKey=..."
            ) from e
    else:
        if coordinates.identity is not None:
            credential = coordinates.identity.credential()
        else:
            from azure.identity.aio import DefaultAzureCredential  # heavy: only when used

            credential = DefaultAzureCredential(
                managed_identity_client_id=coordinates.workload_identity_client_id or None
            )
        client = EventHubProducerClient(
            fully_qualified_namespace=coordinates.fully_qualified_namespace,
            eventhub_name=coordinates.eventhub_name,
            credential=credential,
            **options,
        )
    amqphandshakes.quick_management(client)
    return client, credential


async def _close(client: EventHubProducerClient, credential: Any) -> None:
    with contextlib.suppress(Exception):
        await client.close()
    if credential is not None:
        with contextlib.suppress(Exception):
            await credential.close()


@contextlib.asynccontextmanager
async def producer(coordinates: Coordinates) -> AsyncIterator[EventHubProducerClient]:
    """A producer client for ``coordinates`` for the block, closed after it (`_open`)."""
    client, credential = _open(coordinates)
    try:
        yield client
    finally:
        await _close(client, credential)


class Clients:
    """The Event Hubs clients the operator keeps open between cycles, one per hub and
    credentials (`keptclients`: bounded, least recently used closed first, a failed one
    replaced once)."""

    def __init__(self, *, kept: int = CLIENTS_KEPT) -> None:
        self._kept: keptclients.Kept[tuple[EventHubProducerClient, Any]] = keptclients.Kept(
            kept=kept, close=lambda entry: _close(*entry)
        )

    @property
    def opened(self) -> int:
        """Connections opened, for the tests and the benchmark."""
        return self._kept.opened

    def __len__(self) -> int:
        return len(self._kept)

    async def call(
        self,
        coordinates: Coordinates,
        request: Callable[[EventHubProducerClient], Awaitable[T]],
    ) -> T:
        """``request`` on the kept client for ``coordinates`` (a new one if none is kept)."""
        return await self._kept.call(
            coordinates.key, lambda: _open(coordinates), lambda entry: request(entry[0])
        )

    async def close(self) -> None:
        await self._kept.close()


#: A 404 status in an error's text; not digits of a port or an address ("127.0.0.1:40413").
_STATUS_404 = re.compile(r"(?<![\w.:])404(?![\w.:])")


def _wrap(
    e: BaseException, coordinates: Coordinates, *, limit_seconds: float = TIMEOUT_SECONDS
) -> errors.EventHubBalancerError:
    where = f"Event Hub {coordinates.eventhub_name!r} in {coordinates.fully_qualified_namespace}"
    text = str(e)
    lowered = text.lower()
    if isinstance(e, eh_exceptions.AuthenticationError) or "unauthorized" in lowered:
        return errors.EventHubAuthenticationFailed(
            f"{where}: the credentials were rejected; check the connection string's "
            "SharedAccessKeyName/Key (Listen or Manage rights) or the workload identity's role "
            "assignment (Azure Event Hubs Data Receiver)"
        )
    if "not-found" in lowered or "not found" in lowered or _STATUS_404.search(lowered):
        return errors.EventHubNotFound(
            f"{where} does not exist: fix spec.eventHub.name (or the namespace) to name an "
            "existing Event Hub"
        )
    if isinstance(e, asyncio.TimeoutError | TimeoutError):
        return errors.EventHubUnreachable(f"{where}: no answer within {limit_seconds:g} s")
    return errors.EventHubUnreachable(
        f"{where}: unreachable ({type(e).__name__}: {_first_line(text)})"
    )


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:300]


async def _request(
    coordinates: Coordinates,
    request: Callable[[EventHubProducerClient], Awaitable[T]],
    *,
    clients: Clients | None,
    limit_seconds: float,
) -> T:
    """``request`` on a kept client (``clients``) or on one for this call alone. Raises
    wrapped errors only."""
    try:
        if clients is not None:
            return await clients.call(coordinates, request)
        async with producer(coordinates) as client:
            return await request(client)
    except errors.EventHubBalancerError:
        raise
    except (eh_exceptions.EventHubError, azure_errors.AzureError, OSError, TimeoutError) as e:
        raise _wrap(e, coordinates, limit_seconds=limit_seconds) from e


async def fetch_partition_ids(
    coordinates: Coordinates,
    *,
    limit_seconds: float = TIMEOUT_SECONDS,
    clients: Clients | None = None,
) -> list[str]:
    """The Event Hub's partition ids, in Event Hubs' order. Raises wrapped errors only."""

    async def request(client: EventHubProducerClient) -> list[str]:
        ids = await asyncio.wait_for(client.get_partition_ids(), timeout=limit_seconds)
        return [str(i) for i in ids]

    return await _request(coordinates, request, clients=clients, limit_seconds=limit_seconds)


async def fetch_last_sequence_numbers(
    coordinates: Coordinates,
    partitions: list[str],
    *,
    limit_seconds: float = TIMEOUT_SECONDS,
    clients: Clients | None = None,
) -> dict[str, int]:
    """The last enqueued sequence number per partition (for lag = last - checkpointed)."""

    async def one(client: EventHubProducerClient, pid: str) -> int:
        props = await client.get_partition_properties(pid)
        return int(props.get("last_enqueued_sequence_number", -1))

    async def request(client: EventHubProducerClient) -> dict[str, int]:
        # One request per partition, up to `PROPERTIES_AT_ONCE` at a time on the one
        # connection: a hub's ends cost a round trip per batch, not per partition.
        result: dict[str, int] = {}
        async with asyncio.timeout(limit_seconds):
            for at in range(0, len(partitions), PROPERTIES_AT_ONCE):
                batch = partitions[at : at + PROPERTIES_AT_ONCE]
                ends = await asyncio.gather(*(one(client, pid) for pid in batch))
                result.update(zip(batch, ends, strict=True))
        return result

    return await _request(coordinates, request, clients=clients, limit_seconds=limit_seconds)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionList:
    """Partition ids and whether they came fresh from Event Hubs in this call."""

    ids: tuple[str, ...]
    fetched_at: float  # the caller's clock (seconds)
    fresh: bool


class PartitionCache:
    """Partition ids per consumer, re-read when older than `REFRESH_SECONDS` or the hub changed.

    Each entry keeps the `Coordinates` it was listed with (in memory only: their repr leaves
    the connection string out), so that the operator's growth watch (`handlers.growth`) can
    list a hub again between refreshes: once per hub (`Coordinates.key`), however many
    consumers share it, and hand a longer list to each of them (`grow`).
    """

    def __init__(
        self,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        timeout: float = TIMEOUT_SECONDS,
        gate: asyncio.Semaphore | None = None,
        clients: Clients | None = None,
    ) -> None:
        self.refresh_seconds = refresh_seconds
        #: the kept clients the listings go through; None: a client per listing
        self.clients = clients
        self.timeout = timeout
        #: the turns of the calls in flight (`CONCURRENT_CALLS`)
        self.gate = gate or asyncio.Semaphore(CONCURRENT_CALLS)
        self._entries: dict[str, tuple[Coordinates, PartitionList]] = {}
        #: the consumers of each hub (`Coordinates.key`), as an ordered set
        self._consumers: dict[Hashable, dict[str, None]] = {}
        #: the consumers whose list `grow` lengthened since their last read
        self._grown: set[str] = set()

    def cached(self, consumer: str) -> PartitionList | None:
        entry = self._entries.get(consumer)
        return entry[1] if entry else None

    def forget(self, consumer: str) -> None:
        entry = self._entries.pop(consumer, None)
        self._grown.discard(consumer)
        if entry is not None:
            self._unlink(consumer, entry[0].key)

    def _unlink(self, consumer: str, hub: Hashable) -> None:
        consumers = self._consumers.get(hub)
        if consumers is not None:
            consumers.pop(consumer, None)
            if not consumers:
                del self._consumers[hub]

    def _keep(self, consumer: str, coordinates: Coordinates, listed: PartitionList) -> None:
        entry = self._entries.get(consumer)
        if entry is not None and entry[0].key != coordinates.key:
            self._unlink(consumer, entry[0].key)
        self._entries[consumer] = (coordinates, listed)
        self._consumers.setdefault(coordinates.key, {})[consumer] = None

    async def partition_ids(
        self, consumer: str, coordinates: Coordinates, *, now: float, force: bool = False
    ) -> PartitionList:
        """The cached list while young and for the same hub; else a fresh one (or it raises).
        A list the growth watch lengthened (`grow`) is served fresh once."""
        entry = self._entries.get(consumer)
        if (
            entry is not None
            and not force
            and entry[0].key == coordinates.key
            and now - entry[1].fetched_at < self.refresh_seconds
        ):
            grown = consumer in self._grown
            self._grown.discard(consumer)
            return dataclasses.replace(entry[1], fresh=grown)
        async with self.gate:
            ids = await fetch_partition_ids(
                coordinates, limit_seconds=self.timeout, clients=self.clients
            )
        result = PartitionList(ids=tuple(ids), fetched_at=now, fresh=True)
        self._keep(consumer, coordinates, result)
        self._grown.discard(consumer)
        return result

    def hubs(self) -> list[Hashable]:
        """Every hub a cached list came from, once (its `Coordinates.key`: no secret in it)."""
        return list(self._consumers)

    def consumers(self, hub: Hashable) -> dict[str, tuple[str, ...]]:
        """The cached list of each consumer of ``hub``."""
        return {
            consumer: self._entries[consumer][1].ids for consumer in self._consumers.get(hub, ())
        }

    async def list_hub(self, hub: Hashable) -> tuple[str, ...] | None:
        """``hub``'s partition ids, listed now with its consumers' credentials (raises wrapped
        errors only); None: no consumer of it is cached any more. The cache is left as it
        is: `grow` hands a longer list on."""
        consumers = self._consumers.get(hub)
        if not consumers:
            return None
        coordinates = self._entries[next(iter(consumers))][0]
        async with self.gate:
            ids = await fetch_partition_ids(
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredCheckpoint:
    """What the operator needs from a checkpoint blob."""

    partition: str
    epoch: int
    sequence_number: int


#: Checkpoint containers the operator keeps open between cycles (`keptclients`).
CONTAINERS_KEPT = 2048
Container = tuple[ContainerClient, Any]


def checkpoint_containers(*, kept: int = CONTAINERS_KEPT) -> keptclients.Kept[Container]:
    """The checkpoint containers an operator keeps open between its probes."""
    return keptclients.Kept(kept=kept, close=blobs.close_container)


async def read_checkpoints(
    *,
    fully_qualified_namespace: str,
    eventhub_name: str,
    consumer_group: str,
    container_name: str,
    connection_string: str | None,
    account_url: str | None,
    identity: tenantidentities.TenantIdentity | None = None,
    containers: keptclients.Kept[Container] | None = None,
) -> dict[str, StoredCheckpoint]:
    """Every checkpoint blob of the consumer group (raises wrapped errors only). With
    ``identity`` and no connection string, the blobs are read as that identity; with
    ``containers``, over a container client kept between calls."""
    own = identity is not None and connection_string is None

    def build() -> Container:
        return blobs.build_container(
            container_name=container_name,
            connection_string=connection_string,
            account_url=None if connection_string is not None else account_url,
            credential=identity.credential() if own and identity is not None else None,
        )

    async def request(entry: Container) -> list[checkpointing.Checkpoint]:
        store = checkpointing.CheckpointStore(
            entry[0],
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=eventhub_name,
            consumer_group=consumer_group,
            owner_id="eventhub-balancer-operator",  # reads only; never writes
            retry=CHECKPOINT_RETRY,
        )
        return await store.list()

    try:
        if containers is not None:
            key = (
                container_name,
                hash(connection_string),
                account_url,
                identity.key if own and identity is not None else None,
            )
            listed = await containers.call(key, build, request)
        else:
            entry = build()
            try:
                listed = await request(entry)
            finally:
                await blobs.close_container(entry)
    except errors.InvalidInput as e:
        raise errors.ConfigurationError(f"checkpoint store: {e}") from e
    except errors.EventHubBalancerError:
        raise
    except (azure_errors.AzureError, OSError) as e:
        raise errors.CheckpointStoreUnreachable(
            f"checkpoint container {container_name!r}: {type(e).__name__}"
        ) from e
    return {
        c.partition: StoredCheckpoint(
            partition=c.partition, epoch=c.epoch, sequence_number=c.sequence_number
        )
        for c in listed
    }


def lag(last: Mapping[str, int], checkpoints: Mapping[str, StoredCheckpoint]) -> dict[str, int]:
    """Events behind per partition: last enqueued minus checkpointed (never negative)."""
    result: dict[str, int] = {}
    for pid, last_seq in last.items():
        done = checkpoints[pid].sequence_number if pid in checkpoints else -1
        result[pid] = max(0, last_seq - done)
    return result


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
        identity_policy: IdentityPolicy = ANY_NAMESPACE,
        tenant_identities: tenantidentities.TenantIdentities | None = None,
        concurrent_calls: int = CONCURRENT_CALLS,
    ) -> None:
        #: one turn per call in flight, shared by every consumer (`CONCURRENT_CALLS`)
        self.gate = asyncio.Semaphore(concurrent_calls)
        #: the Event Hubs clients and checkpoint containers kept open between cycles
        self.clients = Clients()
        self.containers = checkpoint_containers()
        self.cache = PartitionCache(
            refresh_seconds=refresh_seconds, timeout=timeout, gate=self.gate, clients=self.clients
        )
        self.timeout = timeout
        self.endpoints = endpoint_policy
        self.identities = identity_policy
        #: the consumers' own ServiceAccounts' identities; None: this process cannot act as
        #: them (a consumer naming one gets a condition saying so)
        self.tenant_identities = tenant_identities

    @staticmethod
    def _coordinates(
        fully_qualified_namespace: str,
        eventhub_name: str,
        connection_string: str | None,
        client_id: str | None,
        identity: tenantidentities.TenantIdentity | None = None,
    ) -> Coordinates:
        return Coordinates(
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=eventhub_name,
            connection_string=connection_string,
            workload_identity_client_id=client_id,
            identity=identity,
        )

    async def _tenant_identity(
        self, *, namespace: str | None, service_account: str | None, connection_string: str | None
    ) -> tenantidentities.TenantIdentity | None:
        """The consumer's own identity when it names a ServiceAccount and no connection
        string; None: a connection string, or the operator's identity (checked already)."""
        if connection_string is not None or not service_account:
            return None
        if self.tenant_identities is None or not namespace:
            raise errors.TenantIdentityUnavailable(
                namespace=namespace or "",
                service_account=service_account,
                problem="cannot be used: this operator was started without access to "
                "ServiceAccount tokens (ehb operator builds it; a tool or test may not)",
            )
        return await self.tenant_identities.identity(
            namespace=namespace, service_account=service_account
        )

    def _failed(self, identity: tenantidentities.TenantIdentity | None, error: Exception) -> None:
        """A rejected identity is looked up afresh next time (its annotation may be fixed)."""
        if (
            identity is not None
            and self.tenant_identities is not None
            and isinstance(error, errors.ConfigurationError)
        ):
            self.tenant_identities.forget(
                namespace=identity.namespace, service_account=identity.service_account
            )

    async def close(self) -> None:
        """Close the kept clients (the operator stops)."""
        await self.clients.close()
        await self.containers.close()

    def forget(self, consumer: str) -> None:
        self.cache.forget(consumer)

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
    ) -> tuple[tuple[str, ...], bool]:
        """(ids, fresh): fresh is False when served from the cache. ``namespace``: the
        Kubernetes namespace of the consumer that asks (`IdentityPolicy`);
        ``service_account``: its spec.serviceAccountName, whose identity is used instead of
        the operator's."""
        self.identities.check(
            namespace=namespace,
            field=EVENTHUB_CREDENTIALS,
            connection_string=connection_string,
            service_account=service_account,
        )
        self.endpoints.check_eventhub(
            fully_qualified_namespace=fully_qualified_namespace,
            connection_string=connection_string,
        )
        identity = await self._tenant_identity(
            namespace=namespace,
            service_account=service_account,
            connection_string=connection_string,
        )
        try:
            result = await self.cache.partition_ids(
                consumer,
                self._coordinates(
                    fully_qualified_namespace, eventhub_name, connection_string, client_id, identity
                ),
                now=now,
            )
        except errors.EventHubBalancerError as e:
            self._failed(identity, e)
            raise
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
    ) -> dict[str, int]:
        self.identities.check(
            namespace=namespace,
            field=EVENTHUB_CREDENTIALS,
            connection_string=connection_string,
            service_account=service_account,
        )
        self.endpoints.check_eventhub(
            fully_qualified_namespace=fully_qualified_namespace,
            connection_string=connection_string,
        )
        identity = await self._tenant_identity(
            namespace=namespace,
            service_account=service_account,
            connection_string=connection_string,
        )
        try:
            async with self.gate:
                return await fetch_last_sequence_numbers(
                    self._coordinates(
                        fully_qualified_namespace,
                        eventhub_name,
                        connection_string,
                        client_id,
                        identity,
                    ),
                    partitions,
                    limit_seconds=self.timeout,
                    clients=self.clients,
                )
        except errors.EventHubBalancerError as e:
            self._failed(identity, e)
            raise

    async def checkpoints(
        self,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        consumer_group: str,
        container_name: str,
        connection_string: str | None,
        account_url: str | None,
        namespace: str | None = None,
        service_account: str | None = None,
    ) -> dict[str, tuple[int, int]]:
        """{partition: (epoch, sequence number)} of the stored checkpoints."""
        self.identities.check(
            namespace=namespace,
            field=CHECKPOINT_CREDENTIALS,
            connection_string=connection_string,
            service_account=service_account,
        )
        self.endpoints.check_blob(account_url=account_url, connection_string=connection_string)
        identity = await self._tenant_identity(
            namespace=namespace,
            service_account=service_account,
            connection_string=connection_string,
        )
        try:
            async with self.gate:
                stored = await read_checkpoints(
                    fully_qualified_namespace=fully_qualified_namespace,
                    eventhub_name=eventhub_name,
                    consumer_group=consumer_group,
                    container_name=container_name,
                    connection_string=connection_string,
                    account_url=account_url,
                    identity=identity,
                    containers=self.containers,
                )
        except errors.EventHubBalancerError as e:
            self._failed(identity, e)
            raise
        return {p: (c.epoch, c.sequence_number) for p, c in stored.items()}
