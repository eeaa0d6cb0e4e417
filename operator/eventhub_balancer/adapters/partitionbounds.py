"""What Event Hubs says about a partition now, without owning it: its bounds, and where a
time falls in it.

A ``latest`` start position or checkpoint reset is seeded from the partition's last
sequence number (`partition_bounds`, a management call), and a start position at a time from
the first event enqueued at or after it (`locate_time`). Kept apart from
``adapters.receiving``, which receives a partition for its owner, because these questions are
asked once, by the consumer's connections and by checkpoint resets, not for every batch.

Where a time falls is decided by what Event Hubs says, never by a silence: the partition's
properties tell whether any event is as recent as the time (its last enqueued time); only
then is one event received, on a link without an owner level (so that it never steals the
partition from its owner), and that event must come. A link that is slow to open, fails, or
is refused while an old owner's exclusive link is still open says nothing about the events:
after the link's own bound it is `errors.EventHubUnreachable`, which the caller retries.
Reading that silence as "every event is older" once seeded a checkpoint past every event
from the time on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Final

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, linkrefusals, receiving
from eventhub_balancer.contracts import partitionreports, startpositions

#: A management call (partition properties) that takes longer has failed.
BOUNDS_TIMEOUT_S: Final = 15.0

#: After its link opened, how long the first event at or after a time may take to come. The
#: properties said one exists, and Event Hubs sends it with the link's first credit.
FIRST_DELIVERY_S: Final = 5.0

#: How long the receive of that first event may take in all: the link's own bound on its
#: opening (reopens of a failed link included), then its first delivery.
FIRST_EVENT_TIMEOUT_S: Final = receiving.LINK_OPEN_TIMEOUT_S + FIRST_DELIVERY_S


async def partition_properties(
    address: receiving.EventHubAddress, partition: str
) -> Mapping[str, Any]:
    """The SDK's ``get_partition_properties`` answer, within `BOUNDS_TIMEOUT_S`."""
    client = receiving.make_client(address)
    try:
        async with asyncio.timeout(BOUNDS_TIMEOUT_S):
            props: Mapping[str, Any] = await client.get_partition_properties(partition)
    except (TimeoutError, Exception) as e:
        described = linkrefusals.not_found(e)
        if described is not None:
            # A hub that does not exist (deleted, or misnamed): said as the receive link's
            # refusal says it, not as an outage, so that a pod says it once for all partitions.
            raise linkrefusals.missing(
                described,
                fully_qualified_namespace=address.fully_qualified_namespace,
                eventhub_name=address.eventhub_name,
                consumer_group=address.consumer_group,
            ) from e
        # What failed, where a report has room for it: "[Errno 111] Connect call failed
        # ('10.0.0.4', 5671)" tells a wrong endpoint from an outage; "ConnectError" alone did not.
        said = partitionreports.first_line(str(e))
        why = f"no answer within {BOUNDS_TIMEOUT_S:g} s" if isinstance(e, TimeoutError) else said
        raise errors.EventHubUnreachable(
            f"partition {partition}: cannot read its properties from "
            f"{address.fully_qualified_namespace}: {type(e).__name__}" + (f": {why}" if why else "")
        ) from e
    finally:
        await client.close()
    return props


async def partition_bounds(
    address: receiving.EventHubAddress, partition: str
) -> startpositions.PartitionBounds:
    """What Event Hubs says about a partition now (to seed a ``latest`` checkpoint)."""
    return bounds_from(await partition_properties(address, partition))


def bounds_from(props: Mapping[str, Any]) -> startpositions.PartitionBounds:
    """A partition's bounds from the SDK's ``get_partition_properties`` answer."""
    return startpositions.PartitionBounds(
        beginning_sequence_number=int(props["beginning_sequence_number"]),
        last_sequence_number=int(props["last_enqueued_sequence_number"]),
        last_offset=str(props["last_enqueued_offset"]),
        empty=bool(props["is_empty"]),
    )


def all_older_than(props: Mapping[str, Any], when: datetime.datetime) -> bool:
    """Whether Event Hubs says that no event of the partition is enqueued at or after
    ``when``: it is empty, or its last event is older. Without a last enqueued time in the
    answer nothing is said, and the answer is no."""
    if props.get("is_empty"):
        return True
    last = props.get("last_enqueued_time_utc")
    return isinstance(last, datetime.datetime) and last < when


@dataclasses.dataclass(frozen=True)
class TimeInPartition:
    """Where a time falls in a partition, as Event Hubs said it."""

    #: The partition's bounds when it was asked: a seed at its end is taken from these, so
    #: that no event enqueued after the answer is skipped.
    bounds: startpositions.PartitionBounds
    #: The first event enqueued at or after the time; None when Event Hubs said there is
    #: none (the partition is empty, or its last event is older).
    first_sequence_number: int | None


async def locate_time(
    address: receiving.EventHubAddress,
    partition: str,
    when: datetime.datetime,
    *,
    wait: float = FIRST_EVENT_TIMEOUT_S,
) -> TimeInPartition:
    """Where ``when`` falls in the partition; raises `errors.EventHubUnreachable` when
    Event Hubs cannot be asked, or when the first event at or after it, which the
    properties say exists, does not come within ``wait``."""
    props = await partition_properties(address, partition)
    bounds = bounds_from(props)
    if all_older_than(props, when):
        return TimeInPartition(bounds=bounds, first_sequence_number=None)
    first = await _first_event_at(address, partition, when, wait=wait)
    return TimeInPartition(bounds=bounds, first_sequence_number=first)


async def first_sequence_at(
    address: receiving.EventHubAddress,
    partition: str,
    when: datetime.datetime,
    *,
    wait: float = FIRST_EVENT_TIMEOUT_S,
) -> int | None:
    """The sequence number of the first event enqueued at or after ``when``, or None when
    Event Hubs says there is none (`locate_time`, whose errors it raises)."""
    located = await locate_time(address, partition, when, wait=wait)
    return located.first_sequence_number


async def _first_event_at(
    address: receiving.EventHubAddress,
    partition: str,
    when: datetime.datetime,
    *,
    wait: float,
) -> int:
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
    except errors.OwnershipLost as e:
        # A link without an owner level owns nothing to lose: it was refused because an
        # owner's exclusive link is open (an old owner not yet gone). That passes.
        raise errors.EventHubUnreachable(
            f"partition {partition}: cannot read the first event at or after "
            f"{when.isoformat()}: an owner's exclusive link refuses the read"
        ) from e
    finally:
        await receiver.close()
    if not batch.events:
        raise errors.EventHubUnreachable(
            f"partition {partition}: the first event at or after {when.isoformat()} did not "
            f"come within {wait:g} s, though the partition's last event is that recent"
        )
    return batch.events[0].sequence_number
