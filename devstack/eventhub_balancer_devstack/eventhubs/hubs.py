"""The emulator's state: a namespace of hubs, their partitions, consumer groups and epochs.

Pure data and rules, no I/O: the connections call in from the event loop's one thread, and
the emulator's thread-safe methods hop onto that thread first. Partitions tell their
listeners (open receivers) when events arrive, so that delivery needs no polling task.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from azure.eventhub._buffered_producer import _partition_resolver

from eventhub_balancer_devstack.eventhubs import events, throttling

#: Compact a partition's list once this many events were dropped by retention, so that
#: dropping stays amortised O(1) without a deque (a list keeps O(1) positional reads).
_COMPACT_AFTER = 4096

#: Real Event Hubs allows at most 1024 partitions (dedicated); we refuse more.
MAX_PARTITIONS = 1024

_BY_OFFSET = operator.attrgetter("offset")
_BY_TIME = operator.attrgetter("enqueued_ms")


class EntityNotFound(LookupError):
    """No such hub or consumer group (AMQP ``amqp:not-found``)."""


class PartitionNotFound(LookupError):
    """No such partition in an existing hub (the service answers 400)."""


class OwnerLevelConflict(Exception):
    """A receiver may not open: a receiver with a higher owner level holds the partition."""


class ReceiverLimitExceeded(Exception):
    """A receiver without owner level may not open: the partition has as many as Event Hubs
    allows (``amqp:resource-limit-exceeded``)."""


class PositionPastEnd(ValueError):
    """A receiver's start names an event after the partition's last (Event Hubs refuses the
    link with ``com.microsoft:argument-error``, in the words this error carries)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What a partition looks like now (what ``get_partition_properties`` reports)."""

    hub: str
    partition: str
    begin_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_offset: int
    last_enqueued_ms: int
    is_empty: bool
    retained_events: int


@dataclasses.dataclass(frozen=True, slots=True)
class EventPosition:
    """Where one event sits in its partition."""

    sequence_number: int
    offset: int
    enqueued_ms: int


class Partition:
    """One partition's events, in order, with retention by count."""

    def __init__(self, *, hub: str, partition_id: str, retention_events: int | None) -> None:
        self.hub = hub
        self.id = partition_id
        self.retention_events = retention_events
        self._events: list[events.StoredEvent] = []
        self._start = 0  # index of the first retained event in _events
        self._base = 0  # sequence number of _events[0]
        self.next_sequence_number = 0
        self.next_offset = 0
        self.last_enqueued_ms = 0
        self.listeners: set[Callable[[], None]] = set()

    @property
    def begin_sequence_number(self) -> int:
        return self._base + self._start

    def append(
        self, batch: Sequence[events.IncomingEvent], *, partition_key: str | None, now_ms: int
    ) -> None:
        """Enqueue a producer's events (a batch stays contiguous) and wake the receivers."""
        # Enqueued times never go back within a partition, even if the clock does.
        enqueued_ms = max(now_ms, self.last_enqueued_ms)
        sequence_number = self.next_sequence_number
        offset = self.next_offset
        stored = self._events
        for event in batch:
            item = events.store(
                event,
                sequence_number=sequence_number,
                offset=offset,
                enqueued_ms=enqueued_ms,
                partition_key=partition_key,
            )
            stored.append(item)
            sequence_number += 1
            offset += len(item.payload)
        if not batch:
            return
        self.next_sequence_number = sequence_number
        self.next_offset = offset
        self.last_enqueued_ms = enqueued_ms
        self._retain()
        for listener in list(self.listeners):
            listener()

    def _retain(self) -> None:
        if self.retention_events is None:
            return
        excess = len(self._events) - self._start - self.retention_events
        if excess > 0:
            self._start += excess
        if self._start >= _COMPACT_AFTER and self._start * 2 >= len(self._events):
            del self._events[: self._start]
            self._base += self._start
            self._start = 0

    def read(self, sequence_number: int, limit: int) -> list[events.StoredEvent]:
        """Up to ``limit`` events from ``sequence_number`` (or the first retained one)."""
        index = max(sequence_number - self._base, self._start)
        return self._events[index : index + limit]

    def last(self) -> events.StoredEvent | None:
        if len(self._events) == self._start:
            return None
        return self._events[-1]

    def sequence_after_offset(self, offset: int, *, inclusive: bool) -> int:
        """The first sequence number whose offset is > (or >=) ``offset``."""
        find = bisect.bisect_left if inclusive else bisect.bisect_right
        index = find(self._events, offset, lo=self._start, key=_BY_OFFSET)
        return self._base + index

    def sequence_after_time(self, enqueued_ms: int, *, inclusive: bool) -> int:
        """The first sequence number enqueued after (or at) ``enqueued_ms``."""
        find = bisect.bisect_left if inclusive else bisect.bisect_right
        index = find(self._events, enqueued_ms, lo=self._start, key=_BY_TIME)
        return self._base + index

    def check_start(self, field: str, value: int) -> None:
        """Refuse a start past the last event, as Event Hubs does: a sequence number or an
        offset above the last one, exclusive or inclusive (so the next event's number, which
        does not exist yet, is refused too; the last one, exclusive, waits for the next).
        An empty partition's last sequence number and offset are -1. Its words are the
        service's, as clients have quoted them (docs/local-stack.md)."""
        if field == "sequence":
            last = self.next_sequence_number - 1
            if value > last:
                raise PositionPastEnd(
                    f"The supplied sequence number '{value}' is invalid. "
                    f"The last sequence number in the system is '{last}'"
                )
        elif field == "offset":
            newest = self.last()
            last = -1 if newest is None else newest.offset
            if value > last:
                raise PositionPastEnd(
                    f"The supplied offset '{value}' is invalid. "
                    f"The last offset in the system is '{last}'"
                )

    def positions(self) -> list[EventPosition]:
        return [
            EventPosition(e.sequence_number, e.offset, e.enqueued_ms)
            for e in self._events[self._start :]
        ]

    def info(self) -> PartitionInfo:
        last = self.last()
        return PartitionInfo(
            hub=self.hub,
            partition=self.id,
            begin_sequence_number=self.begin_sequence_number,
            last_enqueued_sequence_number=-1 if last is None else last.sequence_number,
            last_enqueued_offset=-1 if last is None else last.offset,
            last_enqueued_ms=0 if last is None else last.enqueued_ms,
            is_empty=last is None,
            retained_events=len(self._events) - self._start,
        )


class Readers:
    """The open receivers of one (consumer group, partition) and their owner levels.

    Event Hubs rules: a receiver with an owner level (epoch) at least as high as every open
    one disconnects all others, with or without a level; a receiver with a lower level, or
    without one while a leveled receiver is open, is refused; so is a receiver without one
    past `throttling.RECEIVERS_PER_PARTITION`.
    """

    def __init__(self) -> None:
        self._levels: dict[Hashable, int | None] = {}

    def highest(self) -> int | None:
        levels = [level for level in self._levels.values() if level is not None]
        return max(levels) if levels else None

    def claim(self, reader: Hashable, owner_level: int | None) -> list[Hashable]:
        """Register ``reader``; return the readers it disconnects (or raise)."""
        highest = self.highest()
        if owner_level is None:
            if highest is not None:
                raise OwnerLevelConflict(
                    f"a receiver with owner level {highest} is open on this partition; "
                    "a receiver without owner level cannot join it"
                )
            if len(self._levels) >= throttling.RECEIVERS_PER_PARTITION:
                raise ReceiverLimitExceeded(throttling.limit_words())
            self._levels[reader] = None
            return []
        if highest is not None and owner_level < highest:
            raise OwnerLevelConflict(
                f"a receiver with owner level {highest} is open on this partition; "
                f"owner level {owner_level} is lower"
            )
        stolen = [other for other in self._levels if other is not reader]
        self._levels = {reader: owner_level}
        return stolen

    def open(self) -> list[Hashable]:
        return list(self._levels)

    def release(self, reader: Hashable) -> None:
        self._levels.pop(reader, None)

    def __len__(self) -> int:
        return len(self._levels)


class Hub:
    """An event hub: partitions, consumer groups, and the round-robin cursor."""

    def __init__(
        self,
        *,
        name: str,
        partitions: int,
        consumer_groups: Iterable[str],
        retention_events: int | None,
        created_ms: int,
    ) -> None:
        _check_partition_count(partitions)
        self.name = name
        self.created_ms = created_ms
        self.retention_events = retention_events
        self.partitions: list[Partition] = []
        self.consumer_groups: dict[str, dict[str, Readers]] = {}
        #: The hub's status set to Disabled by its owner: receive links are refused.
        self.disabled = False
        self._round_robin = 0
        for group in consumer_groups:
            self.add_consumer_group(group)
        self.grow(partitions)

    @property
    def partition_ids(self) -> list[str]:
        return [p.id for p in self.partitions]

    def grow(self, count: int) -> None:
        """Add partitions up to ``count`` (partitions can be added, never removed)."""
        _check_partition_count(count)
        if count < len(self.partitions):
            raise ValueError(
                f"hub {self.name!r} has {len(self.partitions)} partitions; "
                f"partition counts can only grow, not shrink to {count}"
            )
        for index in range(len(self.partitions), count):
            self.partitions.append(
                Partition(
                    hub=self.name,
                    partition_id=str(index),
                    retention_events=self.retention_events,
                )
            )

    def add_consumer_group(self, name: str) -> None:
        if not name:
            raise ValueError("a consumer group needs a name")
        self.consumer_groups.setdefault(name, {})

    def partition(self, partition_id: str) -> Partition:
        try:
            index = int(partition_id)
        except ValueError:
            index = -1
        if not 0 <= index < len(self.partitions) or str(index) != partition_id:
            raise PartitionNotFound(
                f"the value '{partition_id}' supplied for partition is invalid: hub "
                f"'{self.name}' has partitions 0 to {len(self.partitions) - 1}"
            )
        return self.partitions[index]

    def readers(self, consumer_group: str, partition_id: str) -> Readers:
        self.partition(partition_id)
        try:
            group = self.consumer_groups[consumer_group]
        except KeyError:
            # Event Hubs' own words, its entity name ending in "|<group>" (the emulator's
            # consumer groups: --consumer-group, or create_consumer_group).
            raise EntityNotFound(
                f"The messaging entity 'emulator:eventhub:{self.name}~32766|{consumer_group}' "
                "could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions."
            ) from None
        return group.setdefault(partition_id, Readers())

    def route(self, partition_key: str | None) -> Partition:
        """Where an event sent to the hub goes: hashed by key, else round robin."""
        if partition_key is not None:
            # The SDK's own copy of the service's hash, so that keys land where Azure puts them.
            code: int = _partition_resolver.generate_hash_code(partition_key)  # type: ignore[no-untyped-call]
            return self.partitions[abs(code % len(self.partitions))]
        partition = self.partitions[self._round_robin % len(self.partitions)]
        self._round_robin += 1
        return partition


def _check_partition_count(count: int) -> None:
    if not 1 <= count <= MAX_PARTITIONS:
        raise ValueError(f"a hub has 1 to {MAX_PARTITIONS} partitions, not {count}")


class Namespace:
    """All hubs of one emulator (one Event Hubs namespace)."""

    def __init__(
        self,
        *,
        consumer_groups: Iterable[str],
        retention_events: int | None,
    ) -> None:
        if retention_events is not None and retention_events < 1:
            raise ValueError(f"retention must keep at least 1 event, not {retention_events}")
        self.default_consumer_groups = tuple(consumer_groups)
        self.retention_events = retention_events
        self.hubs: dict[str, Hub] = {}
        #: The ``$cbs`` and ``$management`` request links attached since the start, by kind
        #: (a client that keeps its link open attaches no more).
        self.request_links: dict[str, int] = {}
        #: Throttling a test asked for (`throttling`).
        self.throttles = throttling.Throttles()

    def create_hub(self, name: str, partitions: int, *, now_ms: int) -> Hub:
        if not name or "/" in name:
            raise ValueError(f"invalid hub name {name!r}")
        if name in self.hubs:
            raise ValueError(f"hub {name!r} exists already")
        hub = Hub(
            name=name,
            partitions=partitions,
            consumer_groups=self.default_consumer_groups,
            retention_events=self.retention_events,
            created_ms=now_ms,
        )
        self.hubs[name] = hub
        return hub

    def hub(self, name: str) -> Hub:
        # Entity names are case-insensitive in Event Hubs.
        hub = self.hubs.get(name) or next(
            (h for n, h in self.hubs.items() if n.lower() == name.lower()), None
        )
        if hub is None:
            raise EntityNotFound(
                f"the messaging entity '{name}' could not be found in this emulator "
                f"(hubs: {', '.join(sorted(self.hubs)) or 'none'})"
            )
        return hub


def hub_counts(spec: Mapping[str, int]) -> dict[str, int]:
    """Validate a {hub: partition count} mapping."""
    result = {}
    for name, count in spec.items():
        _check_partition_count(count)
        result[name] = count
    return result
