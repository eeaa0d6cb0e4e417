"""Whether the consumer group a spec names exists: the part of the data path that listing the
partitions does not see.

Event Hubs' management node answers for a hub and its partitions, but knows nothing of
consumer groups, and Event Hubs creates none on demand: a pod that receives on a group that
does not exist is refused (``amqp:not-found``) on every partition, while the partition listing
says all is well. So the operator asks as a pod would: it opens a receive link on the group's
first partition and closes it at once. The link reads nothing and takes nothing from anyone:

- it has no owner level, so it never disconnects a pod (Event Hubs refuses it instead,
  ``amqp:link:stolen``, while a pod holds the partition: the group exists);
- it starts at the end of the stream, with a credit of one event, and is closed before it
  could be handed any.

A refusal with ``amqp:not-found`` raises `errors.ConsumerGroupNotFound` (or
`errors.EventHubNotFound` when Event Hubs names the hub: `linkrefusals.missing`), and so
does one for a hub its owner disabled (`linkrefusals.disabled`); any other refusal says the
group exists. The caller asks when it listed the partitions afresh (at most
once per `partitionlists.REFRESH_SECONDS` per consumer) or when the last answer was not "it
exists" (`ConsumerGroups.check`), so a group created meanwhile is seen at the next attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable
from typing import Any

from azure.eventhub.aio import EventHubConsumerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    amqphandshakes,
    hubclients,
    linkrefusals,
    linkrepairs,
    tlscontexts,
)

logger = logging.getLogger(__name__)

#: Where the probe starts: the end of the stream (it is closed before anything comes).
LATEST = "@latest"
#: After the link opened, how long the probe listens for a refusal that follows the attach
#: (a broker that attaches, then detaches at once); Event Hubs refuses in the attach itself.
REFUSAL_SECONDS = 0.1


async def probe(
    coordinates: hubclients.Coordinates,
    consumer_group: str,
    partition: str,
    *,
    limit_seconds: float = hubclients.TIMEOUT_SECONDS,
) -> None:
    """Raise `errors.ConsumerGroupNotFound` (or `errors.EventHubNotFound`) when Event Hubs
    refuses a receiver on ``partition`` of ``consumer_group`` for a missing entity;
    `errors.EventHubUnreachable` when it cannot be asked; return when the group exists."""
    where = f"Event Hub {coordinates.eventhub_name!r} in {coordinates.fully_qualified_namespace}"
    client, credential = _open(coordinates, consumer_group)

    async def nothing(events: Any) -> None:
        """Never called: the link is closed before it could deliver."""

    consumer: Any = client._create_consumer(consumer_group, partition, LATEST, nothing, prefetch=1)
    amqphandshakes.read_handshake_back_to_back(consumer)
    try:
        async with asyncio.timeout(limit_seconds):
            await consumer._open()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REFUSAL_SECONDS):
                await consumer._handler.do_work_async()
    except Exception as e:
        described = linkrefusals.not_found(e)
        if described is not None:
            raise linkrefusals.missing(
                described,
                fully_qualified_namespace=coordinates.fully_qualified_namespace,
                eventhub_name=coordinates.eventhub_name,
                consumer_group=consumer_group,
            ) from e
        off = linkrefusals.disabled(
            e,
            fully_qualified_namespace=coordinates.fully_qualified_namespace,
            eventhub_name=coordinates.eventhub_name,
        )
        if off is not None:
            raise off from e  # no receiver can open: nothing says the group is there
        if linkrefusals.is_link_stolen(e) or _refused(e):
            return  # a refusal for another cause: the group is there
        if isinstance(e, TimeoutError):
            raise errors.EventHubUnreachable(
                f"{where}: no receiver on consumer group {consumer_group!r} within "
                f"{limit_seconds:g} s"
            ) from e
        raise errors.EventHubUnreachable(
            f"{where}: cannot open a receiver on consumer group {consumer_group!r} "
            f"({type(e).__name__})"
        ) from e
    finally:
        await _close(consumer, client, credential)


def _refused(error: BaseException) -> bool:
    """An AMQP error naming a condition: Event Hubs answered (the reader quota of the group,
    say), which it does only for a group that exists."""
    condition = getattr(error, "condition", None)
    return condition is not None and linkrefusals.not_found(error) is None


def _open(coordinates: hubclients.Coordinates, consumer_group: str) -> tuple[Any, Any]:
    """A consumer client with the coordinates' credentials (its credential, or None for a
    connection string), retrying nothing: the operator's cycle is the retry loop. The listing
    that comes first has checked the string against the hub's name."""
    options: dict[str, Any] = {"retry_total": 0, "ssl_context": tlscontexts.eventhub_context()}
    if coordinates.connection_string is not None:
        scoped = "entitypath=" in coordinates.connection_string.lower()
        client = EventHubConsumerClient.from_connection_string(
            coordinates.connection_string,
            consumer_group,
            eventhub_name=None if scoped else coordinates.eventhub_name,
            **options,
        )
        return client, None
    if coordinates.identity is not None:
        credential = coordinates.identity.credential()
    else:
        from azure.identity.aio import DefaultAzureCredential  # heavy: only when used

        credential = DefaultAzureCredential(
            managed_identity_client_id=coordinates.workload_identity_client_id or None
        )
    client = EventHubConsumerClient(
        coordinates.fully_qualified_namespace,
        coordinates.eventhub_name,
        consumer_group,
        credential,
        **options,
    )
    return client, credential


async def _close(consumer: Any, client: Any, credential: Any) -> None:
    # The SDK's close waits up to a second for its keep-alive task: stopped first, as a
    # released partition's receiver does.
    await linkrepairs.stop_keep_alive(consumer)
    for closable in (consumer, client, credential):
        if closable is None:
            continue
        try:
            await asyncio.wait_for(closable.close(), timeout=5.0)
        except Exception as e:  # closing a refused link may fail again; nothing to do
            logger.debug("consumer group probe: close failed: %r", e)


class ConsumerGroups:
    """The last answer per consumer: the group its spec names exists, for these coordinates.

    Only "it exists" is kept: a consumer whose group was missing (or could not be asked) is
    asked again at its next listing, which its backoff paces."""

    def __init__(self, *, timeout: float = hubclients.TIMEOUT_SECONDS) -> None:
        self.timeout = timeout
        #: consumer -> (hub key, group) whose group was found
        self._found: dict[str, tuple[Hashable, str]] = {}

    def forget(self, consumer: str) -> None:
        self._found.pop(consumer, None)

    async def check(
        self,
        consumer: str,
        coordinates: hubclients.Coordinates,
        consumer_group: str,
        partitions: tuple[str, ...],
        *,
        fresh: bool,
    ) -> None:
        """Ask Event Hubs (`probe`) unless the group was found for the same hub and group and
        the partition list was not listed afresh; raises as `probe` does."""
        key = (coordinates.key, consumer_group)
        if not partitions or (not fresh and self._found.get(consumer) == key):
            return
        self._found.pop(consumer, None)
        await probe(coordinates, consumer_group, partitions[0], limit_seconds=self.timeout)
        self._found[consumer] = key
