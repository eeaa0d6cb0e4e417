"""The Event Hubs clients the operator asks: where a hub is, a client for it, and its answers.

A hub is named by `Coordinates` (its namespace, name and credentials). A management call (the
partition ids, the partitions' ends) goes through a client kept between cycles
(`Clients`) or one built for the call alone (`producer`); every SDK error leaves as one of
`eventhub_balancer.errors` (`_wrap`), with the namespace and the hub named and never the
connection string. Whether a caller may use the credentials at all is checked before any
client exists (`admissions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Any, TypeVar

from azure.core import exceptions as azure_errors
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub.aio import EventHubProducerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    amqphandshakes,
    keptclients,
    mgmtconnections,
    tenantidentities,
    tlscontexts,
)
from eventhub_balancer.contracts import startpositions

T = TypeVar("T")

#: The longest one management call may take before Event Hubs counts as unreachable.
TIMEOUT_SECONDS = 10.0
#: Calls to Event Hubs and the checkpoint stores in flight at once, per operator. Each opens a
#: connection: a thousand consumers starting together would otherwise open a thousand at
#: once, and those queued behind a server's accept backlog (or the operator's own CPU) ran
#: out of their `TIMEOUT_SECONDS` before they were served, so none of them converged. The time
#: a call waits for its turn does not count against its timeout.
CONCURRENT_CALLS = 32
#: Event Hubs clients the operator keeps between cycles (`Clients`): one per hub and
#: credentials, each with one AMQP connection for its management requests (`mgmtconnections`).
CLIENTS_KEPT = 2048
#: Partition properties requested at once on one client (a hub's ends, for the backlog).
PROPERTIES_AT_ONCE = 16


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


def _open(
    coordinates: Coordinates, *, keep_connection: bool = False
) -> tuple[EventHubProducerClient, Any]:
    """A new producer client for ``coordinates`` (and its credential, None for a connection
    string), its credentials checked against the hub's name. It connects on its first call;
    ``keep_connection``: its management requests share one connection, and one session,
    token and ``$management`` link on it (`mgmtconnections`), for a client kept between
    cycles (a client built for one call, which may also send, is left as the SDK makes it).

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
    if keep_connection:
        mgmtconnections.share(client)
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
    replaced once, one nobody needs closed when released)."""

    def __init__(self, *, kept: int = CLIENTS_KEPT) -> None:
        self._kept: keptclients.Kept[tuple[EventHubProducerClient, Any]] = keptclients.Kept(
            kept=kept, close=lambda entry: _close(*entry), close_seconds=TIMEOUT_SECONDS
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
            coordinates.key,
            lambda: _open(coordinates, keep_connection=True),
            lambda entry: request(entry[0]),
        )

    def release(self, hub: Hashable) -> Awaitable[None] | None:
        """Close the client of ``hub`` (a `Coordinates.key`): no consumer uses these
        credentials for it any more (`keptclients.Kept.release`)."""
        return self._kept.release(hub)

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
) -> dict[str, startpositions.PartitionBounds]:
    """The last enqueued sequence number per partition, with where the events the partition
    still holds begin (lag = the events held after the checkpoint)."""

    async def one(client: EventHubProducerClient, pid: str) -> startpositions.PartitionBounds:
        props = await client.get_partition_properties(pid)
        return startpositions.PartitionBounds(
            beginning_sequence_number=int(props.get("beginning_sequence_number", 0)),
            last_sequence_number=int(props.get("last_enqueued_sequence_number", -1)),
            last_offset=str(props.get("last_enqueued_offset", "")),
            empty=bool(props.get("is_empty", False)),
        )

    async def request(
        client: EventHubProducerClient,
    ) -> dict[str, startpositions.PartitionBounds]:
        # One request per partition, up to `PROPERTIES_AT_ONCE` at a time on the one
        # client. A kept client's take turns on its one connection and link, a round trip
        # each (`mgmtconnections`); a client built for this call opens one per request.
        result: dict[str, startpositions.PartitionBounds] = {}
        async with asyncio.timeout(limit_seconds):
            for at in range(0, len(partitions), PROPERTIES_AT_ONCE):
                batch = partitions[at : at + PROPERTIES_AT_ONCE]
                ends = await asyncio.gather(*(one(client, pid) for pid in batch))
                result.update(zip(batch, ends, strict=True))
        return result

    return await _request(coordinates, request, clients=clients, limit_seconds=limit_seconds)
