"""The checkpoint blobs as the operator reads them: every partition's epoch and position.

Their epochs are the last floor for epochs when ConfigMaps and status were lost, and their
sequence numbers give the lag per partition for ``weighting: lag``. The operator only lists
them; the consumer pods write them (`checkpointing`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from azure.core import exceptions as azure_errors
from azure.storage.blob.aio import ContainerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs, checkpointing, keptclients, retrying, tenantidentities

#: The checkpoint store's budget for one listing in a cycle: short, the next cycle retries.
CHECKPOINT_RETRY = retrying.RetryPolicy(attempts=2, budget_seconds=5.0, attempt_timeout_seconds=4.0)


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
    *,
    container_name: str,
    connection_string: str | None,
    account_url: str | None,
    identity: tenantidentities.TenantIdentity | None,
) -> Hashable:
    """What a kept container client is kept by: the container and how it is reached (the
    connection string only hashed, so the key holds no secret)."""
    own = identity is not None and connection_string is None
    return (
        container_name,
        hash(connection_string),
        account_url,
        identity.key if own and identity is not None else None,
    )


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
            key = container_key(
                container_name=container_name,
                connection_string=connection_string,
                account_url=account_url,
                identity=identity,
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
