"""What Event Hubs says about a partition now, without owning it: its bounds, and where a
time falls in it.

A ``latest`` start position or checkpoint reset is seeded from the partition's last
sequence number (`partition_bounds`, a management call), and a start position at a time from
the first event enqueued at or after it (`first_sequence_at`, a peek on a link without an
owner level, so that it never steals the partition from its owner). Kept apart from
``adapters.receiving``, which receives a partition for its owner, because these questions are
asked once, by the consumer's connections and by checkpoint resets, not for every batch.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import amqphandshakes, deliveries, receiving
from eventhub_balancer.contracts import startpositions

#: A management call (partition properties) that takes longer has failed.
BOUNDS_TIMEOUT_S = 15.0


async def partition_bounds(
    address: receiving.EventHubAddress, partition: str
) -> startpositions.PartitionBounds:
    """What Event Hubs says about a partition now (to seed a ``latest`` checkpoint)."""
    client = receiving.make_client(address)
    amqphandshakes.quick_management(client)
    try:
        async with asyncio.timeout(BOUNDS_TIMEOUT_S):
            props = await client.get_partition_properties(partition)
    except (TimeoutError, Exception) as e:
        raise errors.EventHubUnreachable(
            f"partition {partition}: cannot read its properties: {type(e).__name__}"
        ) from e
    finally:
        await client.close()
    return bounds_from(props)


def bounds_from(props: Mapping[str, Any]) -> startpositions.PartitionBounds:
    """A partition's bounds from the SDK's ``get_partition_properties`` answer."""
    return startpositions.PartitionBounds(
        beginning_sequence_number=int(props["beginning_sequence_number"]),
        last_sequence_number=int(props["last_enqueued_sequence_number"]),
        last_offset=str(props["last_enqueued_offset"]),
        empty=bool(props["is_empty"]),
    )


async def first_sequence_at(
    address: receiving.EventHubAddress,
    partition: str,
    when: datetime.datetime,
    *,
    wait: float = 5.0,
) -> int | None:
    """The sequence number of the first event enqueued at or after ``when``, or None when no
    such event arrives within ``wait`` (then every event so far is older)."""
    # Without an owner level: this peek must not steal the partition from anyone.
    receiver = receiving.PartitionReceiver(
        address=address,
        partition=partition,
        epoch=None,
        position=deliveries.ReceivePosition.since(when),
        prefetch=1,
    )
    receiver.start()
    try:
        batch = await receiver.next_batch(max_size=1, max_wait=wait)
    finally:
        await receiver.close()
    return batch.events[0].sequence_number if batch.events else None
