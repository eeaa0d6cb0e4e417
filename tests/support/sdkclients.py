"""In-memory stand-ins for the Azure SDK clients that the adapters drive, on fake loop time.

`FakeEventHub` hands out SDK-shaped aio consumer clients (patch ``receiving.make_client``
with `FakeEventHub.client`): partition properties from the management link, and receive
links (``_create_consumer``, ``_open``, ``receive``) that deliver the partition's events from
their position, and that can be told to open slowly, to fail as a dropped connection does, or
to be refused as Event Hubs refuses a link without an owner level while an owner's exclusive
link is open; a link whose sequence number is past the partition's last event is refused as
Event Hubs refuses it. `NoCheckpoints` is a checkpoint container with no blob yet. Every wait
is on the event loop's clock, so under ``@pytest.mark.looptime`` a 30-second link takes no
time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from azure.core import exceptions as azure_errors
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub._pyamqp import error as amqp

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

OnEvents = Callable[[list[Any]], Awaitable[None]]


def enqueued_time(n: int) -> datetime.datetime:
    """When event ``n`` of every fake partition was enqueued: one a second from `T0`."""
    return T0 + datetime.timedelta(seconds=n)


def sdk_event(n: int) -> Any:
    """Event ``n`` as the SDK hands it to a receive callback (what ``receiving`` reads)."""
    return types.SimpleNamespace(
        sequence_number=n,
        offset=str(n * 10),
        enqueued_time=enqueued_time(n),
        partition_key=None,
        properties=None,
        body=b"x",
        _last_enqueued_event_properties=None,
        _message=types.SimpleNamespace(delivery_annotations=None),
    )


@dataclasses.dataclass
class FakePartition:
    """One partition: events ``0 .. count-1``, and how its receive links behave."""

    count: int = 0
    #: Seconds every receive link takes to open.
    open_delay: float = 0.0
    #: So many next link openings fail as a dropped connection does.
    failing_opens: int = 0
    #: While set, a link without an owner level is refused (``amqp:link:stolen``), as Event
    #: Hubs refuses one while an owner's exclusive link is open.
    held_by_owner: bool = False
    #: Whether the properties carry the last enqueued time (an answer may lack it).
    tells_enqueued_time: bool = True
    #: (loop time, owner level) of every link opening begun.
    opens: list[tuple[float, int | None]] = dataclasses.field(default_factory=list)
    #: Loop time of every partition properties read.
    properties_reads: list[float] = dataclasses.field(default_factory=list)

    def properties(self) -> dict[str, Any]:
        """The SDK's ``get_partition_properties`` answer."""
        last = self.count - 1
        props: dict[str, Any] = {
            "beginning_sequence_number": 0,
            "last_enqueued_sequence_number": last,
            "last_enqueued_offset": str(last * 10) if self.count else "-1",
            "is_empty": self.count == 0,
        }
        if self.tells_enqueued_time:
            props["last_enqueued_time_utc"] = enqueued_time(last) if self.count else T0
        return props

    def refusal(self, position: Any) -> amqp.AMQPLinkError | None:
        """How Event Hubs refuses a link whose sequence number is past the last event
        (inclusive or not), in its words and with its tracking tail; None when it opens."""
        last = self.count - 1
        if not isinstance(position, int) or position <= last:
            return None
        return amqp.AMQPLinkError(
            condition=b"com.microsoft:argument-error",
            description=(
                f"The supplied sequence number '{position}' is invalid. The last sequence "
                f"number in the system is '{last}' TrackingId:7a1f, SystemTracker:shop:eventhub"
                ":orders~32766|$default, Timestamp:2026-01-01T00:00:00"
            ).encode(),
        )

    def events_from(self, position: Any, *, inclusive: bool) -> list[Any]:
        """The events a link opened at the SDK's ``event_position`` receives."""
        events = [sdk_event(n) for n in range(self.count)]
        if isinstance(position, datetime.datetime):
            return [e for e in events if e.enqueued_time >= position]
        if isinstance(position, int):
            return [e for e in events if e.sequence_number >= position + (not inclusive)]
        assert position == "-1", f"position {position!r} is not faked"
        return events


class FakeReceiveLink:
    """The SDK's per-partition consumer: one receive link."""

    def __init__(
        self,
        partition: FakePartition,
        position: Any,
        on_events: OnEvents,
        *,
        inclusive: bool,
        owner_level: int | None,
    ) -> None:
        self.partition = partition
        self.position = position
        self.on_events = on_events
        self.inclusive = inclusive
        self.owner_level = owner_level

    async def _open(self) -> None:
        partition = self.partition
        partition.opens.append((asyncio.get_running_loop().time(), self.owner_level))
        await asyncio.sleep(partition.open_delay)
        if partition.failing_opens:
            partition.failing_opens -= 1
            raise eh_exceptions.ConnectionLostError("connection lost (injected)")
        if partition.held_by_owner and self.owner_level is None:
            raise amqp.AMQPLinkError(
                condition=amqp.ErrorCondition.LinkStolen.value,
                description=b"At least one receiver for the endpoint is created with an epoch",
            )
        refused = partition.refusal(self.position)
        if refused is not None:
            raise refused

    async def receive(self, *args: Any) -> None:
        events = self.partition.events_from(self.position, inclusive=self.inclusive)
        if events:
            await self.on_events(events)
        await asyncio.sleep(3600)  # a live link waits for more until it is closed

    async def close(self) -> None:
        """Nothing held."""


class FakeSdkClient:
    """An ``EventHubConsumerClient`` of one `FakeEventHub`."""

    def __init__(self, hub: FakeEventHub) -> None:
        self.hub = hub

    def _create_consumer(
        self,
        consumer_group: str,
        partition: str,
        position: Any,
        on_events: OnEvents,
        *,
        event_position_inclusive: bool,
        owner_level: int | None,
        **kwargs: Any,
    ) -> FakeReceiveLink:
        return FakeReceiveLink(
            self.hub.partitions[partition],
            position,
            on_events,
            inclusive=event_position_inclusive,
            owner_level=owner_level,
        )

    async def get_partition_properties(self, partition: str) -> dict[str, Any]:
        self.hub.partitions[partition].properties_reads.append(asyncio.get_running_loop().time())
        return self.hub.partitions[partition].properties()

    async def close(self) -> None:
        """Nothing held."""


class FakeEventHub:
    """Partitions by id; `client` stands in for ``receiving.make_client``."""

    def __init__(self, partitions: Mapping[str, FakePartition]) -> None:
        self.partitions = dict(partitions)

    def client(self, address: Any) -> FakeSdkClient:
        return FakeSdkClient(self)


class _MissingBlob:
    async def get_blob_properties(self) -> Any:
        raise azure_errors.ResourceNotFoundError("The specified blob does not exist.")


class NoCheckpoints:
    """A checkpoint container that holds no blob yet: a partition's first take-up."""

    container_name = "checkpoints"

    def get_blob_client(self, name: str) -> _MissingBlob:
        return _MissingBlob()
