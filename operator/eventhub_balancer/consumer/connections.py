"""Opening what an assignment names: the Event Hub's receivers and the checkpoint store.

The ConfigMap carries coordinates only (namespace, hub, consumer group, container, account
URL); credentials come from the pod's own environment (a Secret as env, or as files read again
when they change: `secretfiles`) or workload identity. This module joins the two and gives
the runtime a :class:`Backend`: a checkpoint store, a receiver factory and the
start-position resolver for partitions without a checkpoint, and the swap of a credential
file's new value under them (`Backend.renew`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    blobs,
    checkpointing,
    deadletters,
    deliveries,
    partitionbounds,
    receivecredentials,
    receiving,
    retrying,
)
from eventhub_balancer.consumer import assignments, partitions, ports, secretfiles
from eventhub_balancer.contracts import checkpointblobs, endpoints, startpositions

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Credentials:
    """What the pod's environment says about its credentials: the secrets (``repr`` never
    shows them), where they may be sent (the pod's own `endpoints.EndpointPolicy`: an
    assignment ConfigMap names hosts, and its data is not the pod's to trust blindly), and
    the pod's uid, which the owner id carries so that two incarnations of one pod name never
    share an owner id."""

    eventhub_connection_string: str | None = dataclasses.field(default=None, repr=False)
    blob_connection_string: str | None = dataclasses.field(default=None, repr=False)
    endpoint_policy: endpoints.EndpointPolicy = dataclasses.field(
        default_factory=lambda: endpoints.EndpointPolicy(allow_development=True)
    )
    pod_uid: str = ""
    #: The files of the ``*_FILE`` settings: their values (the newest they passed the checks
    #: with) stand for the strings above.
    files: secretfiles.SecretFiles = dataclasses.field(
        default_factory=secretfiles.SecretFiles, compare=False
    )

    def eventhub_string(self) -> str | None:
        """The Event Hubs connection string the pod uses now (None: workload identity)."""
        file = self.files.eventhub
        return file.value if file is not None else self.eventhub_connection_string

    def blob_string(self) -> str | None:
        """The checkpoint store's connection string the pod uses now (None: identity)."""
        file = self.files.blob
        return file.value if file is not None else self.blob_connection_string


def owner_id_of(pod: str, pod_uid: str) -> str:
    """The owner id in checkpoint blobs: the pod's name and, when known, its uid."""
    return f"{pod}/{pod_uid}" if pod_uid else pod


@dataclasses.dataclass(frozen=True)
class Coordinates:
    """What of an assignment decides which clients to open (a change reopens them)."""

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    checkpoint_container: str
    checkpoint_account_url: str
    start_position: str

    @classmethod
    def of(cls, assignment: assignments.Assignment) -> Coordinates:
        return cls(
            fully_qualified_namespace=assignment.fully_qualified_namespace,
            eventhub_name=assignment.event_hub_name,
            consumer_group=assignment.consumer_group or "$Default",
            checkpoint_container=assignment.checkpoint_container,
            checkpoint_account_url=assignment.checkpoint_account_url,
            start_position=repr(assignment.start_position),
        )

    def __str__(self) -> str:
        """For a log line: ``Event Hub 'orders' in shop.servicebus.windows.net, consumer group
        '$Default', checkpoints in container 'checkpoints'`` (and its account when named)."""
        account = f" of {self.checkpoint_account_url}" if self.checkpoint_account_url else ""
        return (
            f"Event Hub {self.eventhub_name!r} in {self.fully_qualified_namespace}, consumer "
            f"group {self.consumer_group!r}, checkpoints in container "
            f"{self.checkpoint_container!r}{account}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Backend:
    """The clients of one set of coordinates."""

    store: ports.Checkpoints
    open_receiver: ports.ReceiverFactory
    resolve_start: ports.StartResolver
    #: Where ``onFailure: deadLetter`` writes (None: nowhere; such batches are parked).
    dead_letters: ports.DeadLetters | None = None
    #: A fenced checkpoint against the partition's end (None: not checked).
    check_position: ports.PositionCheck | None = None
    #: A new connection string under these clients (None: they are opened again instead).
    renew: Renewal | None = None


class Renewal(Protocol):
    """Swaps a credential file's new value under open clients: ``eventhub_string``, under
    the receivers opened from then on (and the reads of partition bounds); ``blob_string``,
    under the checkpoint store's and the dead letters' requests. Raises, with nothing
    swapped, when the value cannot serve the clients' coordinates."""

    async def __call__(self, *, eventhub_string: bool, blob_string: bool) -> None: ...


class BackendFactory(Protocol):
    def __call__(
        self, assignment: assignments.Assignment
    ) -> contextlib.AbstractAsyncContextManager[Backend]: ...


def _missing(field: str, what: str) -> errors.InvalidInput:
    return errors.InvalidInput(field, f"the assignment ConfigMap has no {what}")


class AzureBackends:
    """Backends on Event Hubs and Blob Storage (or their local stand-ins)."""

    def __init__(
        self,
        *,
        credentials: Credentials,
        owner_id: str,
        batch: partitions.BatchSettings,
        retry: retrying.RetryPolicy | None = None,
    ) -> None:
        self.credentials = credentials
        self.owner_id = owner_id_of(owner_id, credentials.pod_uid)
        self.batch = batch
        self.retry = retry or retrying.RetryPolicy()

    @contextlib.asynccontextmanager
    async def __call__(self, assignment: assignments.Assignment) -> AsyncIterator[Backend]:
        where = Coordinates.of(assignment)
        if not where.fully_qualified_namespace or not where.eventhub_name:
            raise _missing("eventHub", "Event Hub namespace or name")
        if not where.checkpoint_container:
            raise _missing("checkpointStore.containerName", "checkpoint container")
        start = startpositions.parse_start_position(assignment.start_position or "earliest")
        policy = self.credentials.endpoint_policy
        eventhub_connection = self.credentials.eventhub_string()
        policy.check_eventhub(
            fully_qualified_namespace=where.fully_qualified_namespace,
            connection_string=eventhub_connection,
        )
        address = receiving.EventHubAddress(
            fully_qualified_namespace=where.fully_qualified_namespace,
            eventhub_name=where.eventhub_name,
            consumer_group=where.consumer_group,
            connection_string=eventhub_connection,
        )
        blob_connection = self.credentials.blob_string()
        account_url = None if blob_connection else where.checkpoint_account_url or None
        if blob_connection is None and account_url is None:
            raise errors.ConfigurationError(
                "no checkpoint store credentials: set EHB_BLOB_CONNECTION_STRING_FILE (or "
                "EHB_BLOB_CONNECTION_STRING), or give the EventHubConsumer a "
                "checkpointStore.accountUrl for workload identity"
            )
        policy.check_blob(account_url=account_url, connection_string=blob_connection)
        async with contextlib.AsyncExitStack() as stack:
            # On workload identity, one credential for every link and properties read.
            address = await stack.enter_async_context(receivecredentials.shared(address))
            containers = _Containers(stack, where.checkpoint_container)
            container = await containers.open(blob_connection, account_url)
            store = checkpointing.CheckpointStore(
                container,
                fully_qualified_namespace=where.fully_qualified_namespace,
                eventhub_name=where.eventhub_name,
                consumer_group=where.consumer_group,
                owner_id=self.owner_id,
                retry=self.retry,
            )

            # Partitions whose links fail together (an outage) say so in one line.
            reopens = receiving.shared_reopens()

            def open_receiver(
                partition: str, epoch: int, position: deliveries.ReceivePosition
            ) -> ports.Receiver:
                return receiving.PartitionReceiver(
                    address=address,
                    partition=partition,
                    epoch=epoch,
                    position=position,
                    prefetch=self.batch.prefetch,
                    buffer_limit=self.batch.buffer_limit,
                    reopens=reopens,
                )

            async def resolve_start(partition: str) -> Any:
                return await _resolve_start(store, address, partition, start)

            async def check_position(
                partition: str, checkpoint: ports.Checkpoint
            ) -> ports.Checkpoint | None:
                return await _check_position(store, address, partition, start, checkpoint)

            dead_letters = deadletters.DeadLetterWriter(
                container,
                fully_qualified_namespace=where.fully_qualified_namespace,
                eventhub_name=where.eventhub_name,
                consumer_group=where.consumer_group,
            )

            async def renew(*, eventhub_string: bool, blob_string: bool) -> None:
                nonlocal address
                renewed = address
                if eventhub_string:
                    connection = self.credentials.eventhub_string()
                    policy.check_eventhub(
                        fully_qualified_namespace=where.fully_qualified_namespace,
                        connection_string=connection,
                    )
                    renewed = dataclasses.replace(address, connection_string=connection)
                if blob_string:
                    connection = self.credentials.blob_string()
                    policy.check_blob(account_url=None, connection_string=connection)
                    fresh = await containers.open(connection, None)
                    store.use_container(fresh)
                    dead_letters.container = fresh
                address = renewed  # read by every receiver and partition-bounds read after

            yield Backend(
                store=store,
                open_receiver=open_receiver,
                resolve_start=resolve_start,
                dead_letters=dead_letters,
                check_position=check_position,
                renew=renew,
            )


class _Containers:
    """The checkpoint container's clients: the one in use, and the one a new key replaced,
    kept open for the requests it still carries until the next swap; older ones are closed,
    and all of them with the backend."""

    def __init__(self, stack: contextlib.AsyncExitStack, name: str) -> None:
        self._name = name
        self._open: list[contextlib.AsyncExitStack] = []
        # One callback for all of them: one per client would stay on the backend's stack,
        # each with its closed client, for every rotation of the pod's life.
        stack.push_async_callback(self._close_all)

    async def _close_all(self) -> None:
        async with contextlib.AsyncExitStack() as closing:  # every one, newest first
            for own in self._open:
                closing.push_async_callback(own.aclose)
            self._open.clear()

    async def open(self, connection_string: str | None, account_url: str | None) -> Any:
        own = contextlib.AsyncExitStack()
        client = await own.enter_async_context(
            blobs.open_container(
                container_name=self._name,
                connection_string=connection_string,
                account_url=account_url,
            )
        )
        self._open.append(own)
        while len(self._open) > 2:
            await self._open.pop(0).aclose()
        return client


async def _resolve_start(
    store: checkpointing.CheckpointStore,
    address: receiving.EventHubAddress,
    partition: str,
    start: startpositions.StartPosition,
) -> startpositions.StartPosition | checkpointblobs.Position:
    """The seed for a missing checkpoint; asks Event Hubs only when one is needed, and
    raises `errors.EventHubUnreachable` (the worker fails and starts again after its
    backoff) when Event Hubs cannot answer: never a guess, which would be written."""
    if isinstance(start, startpositions.Earliest | startpositions.FromSequenceNumber):
        return start
    if await store.read(partition) is not None:
        # fence keeps the existing position; this seed is never written.
        return checkpointblobs.NOTHING_PROCESSED_POSITION
    match start:
        case startpositions.Latest():
            bounds = await partitionbounds.partition_bounds(address, partition)
            return startpositions.seed_position(start, bounds=bounds)
        case startpositions.FromEnqueuedTime(enqueued_time=when):
            return await _seed_at(address, partition, when)


async def _seed_at(
    address: receiving.EventHubAddress, partition: str, when: datetime.datetime
) -> checkpointblobs.Position:
    """The seed of ``{enqueuedTime: when}``: the event before the first one enqueued at or
    after it. It is the end only when Event Hubs said no event is that recent; a link that
    did not deliver raises EventHubUnreachable instead, and the worker retries."""
    located = await partitionbounds.locate_time(address, partition, when)
    first = located.first_sequence_number
    if first is None:
        return startpositions.seed_position(startpositions.LATEST, bounds=located.bounds)
    return startpositions.seed_position(startpositions.FromSequenceNumber(sequence_number=first))


#: Said when a checkpoint names an event the partition does not have.
PAST_THE_END = (
    "partition %s: checkpoint at sequence number %d is past the partition's last event (%d): "
    "the Event Hub was created again under its name, or the blob was edited. Starting again "
    "from startPosition %s: checkpoint moved back to sequence number %d"
)


async def _check_position(
    store: checkpointing.CheckpointStore,
    address: receiving.EventHubAddress,
    partition: str,
    start: startpositions.StartPosition,
    checkpoint: ports.Checkpoint,
) -> checkpointing.Checkpoint | None:
    """None when ``checkpoint`` names an event the partition has (or none yet). A checkpoint
    past the partition's last event is no position in its stream: received from there, every
    event below it would be skipped. It is moved back to the start position, as if there were
    none, and said at WARNING. Raises `errors.EventHubUnreachable` when Event Hubs cannot say
    (the worker starts again after its backoff), and `errors.InvalidInput` when the start
    position is past the end too."""
    if checkpoint.sequence_number < 0:
        return None  # nothing processed: before every event
    bounds = await partitionbounds.partition_bounds(address, partition)
    if checkpoint.sequence_number <= bounds.last_sequence_number:
        return None
    if isinstance(start, startpositions.FromEnqueuedTime):
        seed = await _seed_at(address, partition, start.enqueued_time)
    else:
        seed = startpositions.seed_position(start, bounds=bounds)
    if seed.sequence_number > bounds.last_sequence_number:
        raise errors.InvalidInput(
            "startPosition",
            f"{startpositions.to_json(start)} is past the last event of partition {partition} "
            f"({bounds.last_sequence_number}), and so is its checkpoint "
            f"({checkpoint.sequence_number}): the partition waits until it has that event",
        )
    logger.warning(
        PAST_THE_END,
        partition,
        checkpoint.sequence_number,
        bounds.last_sequence_number,
        startpositions.to_json(start),
        seed.sequence_number,
    )
    return await store.rewind(partition, seed)
