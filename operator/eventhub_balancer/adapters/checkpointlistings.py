"""The checkpoint blobs as the operator reads them: every partition's epoch and position, and
the ETags of the SDK's ownership blobs beside them (`read_claims`).

Their epochs are the last floor for epochs when ConfigMaps and status were lost, and their
sequence numbers give the lag per partition for ``weighting: lag``. The operator only lists
them; the consumer pods write them (`checkpointing`). The ownership blobs are written by an
SDK processor alone: one that rewrites them probe after probe runs beside the pods
(`handlers.foreignclaims`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from azure.core import exceptions as azure_errors
from azure.storage.blob.aio import ContainerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs, checkpointing, keptclients, retrying, tenantidentities
from eventhub_balancer.contracts import checkpointblobs, storeaddresses

T = TypeVar("T")

#: The checkpoint store's budget for one listing in a cycle: short (the next cycle retries),
#: but bounded by time rather than by a count: an account at its request rate refuses a few
#: requests in a row (503 ServerBusy, 500 OperationTimedOut) within a fraction of a second,
#: which two attempts alone turned into CheckpointStoreUnreachable, its Warning Event and a
#: backoff that held up hand-offs.
CHECKPOINT_RETRY = retrying.RetryPolicy(budget_seconds=5.0, attempt_timeout_seconds=4.0)


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


def container_key(
    address: storeaddresses.StoreAddress, identity: tenantidentities.TenantIdentity | None
) -> Hashable:
    """What a kept container client is kept by: the container and how it is reached (the
    connection string only hashed, so the key holds no secret)."""
    own = identity is not None and address.connection_string is None
    return (
        address.container_name,
        hash(address.connection_string),
        address.account_url,
        identity.key if own and identity is not None else None,
    )


async def read_checkpoints(
    address: storeaddresses.StoreAddress,
    *,
    identity: tenantidentities.TenantIdentity | None = None,
    containers: keptclients.Kept[Container] | None = None,
) -> dict[str, StoredCheckpoint]:
    """Every checkpoint blob of the consumer group (raises wrapped errors only). With
    ``identity`` and no connection string, the blobs are read as that identity; with
    ``containers``, over a container client kept between calls."""

    async def request(entry: Container) -> list[checkpointing.Checkpoint]:
        store = checkpointing.CheckpointStore(
            entry[0],
            fully_qualified_namespace=address.fully_qualified_namespace,
            eventhub_name=address.eventhub_name,
            consumer_group=address.consumer_group,
            owner_id="eventhub-balancer-operator",  # reads only; never writes
            retry=CHECKPOINT_RETRY,
        )
        return await store.list()

    listed = await _over_container(request, address, identity=identity, containers=containers)
    return {
        c.partition: StoredCheckpoint(
            partition=c.partition, epoch=c.epoch, sequence_number=c.sequence_number
        )
        for c in listed
    }


async def read_claims(
    address: storeaddresses.StoreAddress,
    *,
    identity: tenantidentities.TenantIdentity | None = None,
    containers: keptclients.Kept[Container] | None = None,
) -> dict[str, str]:
    """{partition: ETag} of the SDK's ownership blobs of the consumer group: one listing of
    their names (no metadata), raising wrapped errors only, as `read_checkpoints`."""
    prefix = address.blob_prefix(checkpointblobs.OWNERSHIP)

    async def request(entry: Container) -> dict[str, str]:
        async def list_once() -> dict[str, str]:
            found = {}
            try:
                async for item in entry[0].list_blobs(name_starts_with=prefix):
                    found[checkpointblobs.partition_of(item.name)] = str(item.etag).strip('"')
            except azure_errors.ResourceNotFoundError as e:
                raise errors.ConfigurationError(
                    f"checkpoint container {address.container_name!r} does not exist "
                    f"({retrying.describe(e)}): create it, or fix checkpointStore.containerName"
                ) from e
            return found

        budget = retrying.Budget(
            policy=CHECKPOINT_RETRY, rng=random.Random(), operation=f"list claims under {prefix}"
        )
        return await retrying.call_with_retries(budget, list_once)

    return await _over_container(request, address, identity=identity, containers=containers)


async def _over_container(
    request: Callable[[Container], Awaitable[T]],
    address: storeaddresses.StoreAddress,
    *,
    identity: tenantidentities.TenantIdentity | None,
    containers: keptclients.Kept[Container] | None,
) -> T:
    """``request`` over the container: a kept client (``containers``) or one of its own."""
    connection_string = address.connection_string
    own = identity is not None and connection_string is None

    def build() -> Container:
        return blobs.build_container(
            container_name=address.container_name,
            connection_string=connection_string,
            account_url=None if connection_string is not None else address.account_url,
            credential=identity.credential() if own and identity is not None else None,
        )

    try:
        if containers is not None:
            return await containers.call(container_key(address, identity), build, request)
        entry = build()
        try:
            return await request(entry)
        finally:
            await blobs.close_container(entry)
    except errors.InvalidInput as e:
        raise errors.ConfigurationError(f"checkpoint store: {e}") from e
    except errors.CheckpointStoreUnreachable as e:
        # A spent budget names the blobs' prefix, which reads as the Event Hubs namespace.
        if str(e).startswith("checkpoint container"):
            raise
        where = f"checkpoint container {address.container_name!r}"
        named = errors.CheckpointStoreUnreachable(f"{where}: {e}")
        named.steady = f"{where}: {e.steady or e}"
        raise named from e
    except errors.EventHubBalancerError:
        raise
    except (azure_errors.AzureError, OSError) as e:
        raise errors.CheckpointStoreUnreachable(
            f"checkpoint container {address.container_name!r}: {type(e).__name__}"
        ) from e
