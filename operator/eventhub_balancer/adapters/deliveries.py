"""What the receive adapter hands out and where it starts: our own types, free of the SDK.

The consumer runtime, the user's handler and the Spark frames see only these; the Event Hubs
SDK's ``EventData`` is copied into :class:`ReceivedEvent` at the door (``adapters.receiving``).
The names say "received" and "receive" because two other things in the project are called an
event (a Kubernetes Event) and a position (a checkpoint blob's ``checkpointblobs.Position``).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class ReceivedEvent:
    """One event received from Event Hubs, detached from the SDK: what a user's handler sees."""

    partition: str
    sequence_number: int
    offset: str
    enqueued_time: datetime.datetime
    partition_key: str | None
    properties: Mapping[str, Any]
    body: bytes


@dataclasses.dataclass(frozen=True)
class LastEnqueued:
    """The partition's newest event as reported with deliveries (runtime metrics): for lag."""

    sequence_number: int
    offset: str | None
    enqueued_time: datetime.datetime | None
    retrieved_time: datetime.datetime | None


@dataclasses.dataclass(frozen=True)
class ReceivedBatch:
    """A micro-batch in partition order; empty when nothing arrived within the wait."""

    events: Sequence[ReceivedEvent]
    last_enqueued: LastEnqueued | None
    #: The receive link was open when the batch was handed out. An empty batch from a link
    #: that is not (one never opened against a refused port, or reopening) is no answer from
    #: Event Hubs: a restarted worker's failure stays reported until one comes.
    linked: bool


@dataclasses.dataclass(frozen=True)
class ReceivePosition:
    """Where a receiver starts reading a partition; build one with the class methods."""

    sequence_number: int | None = None
    enqueued_time: datetime.datetime | None = None
    latest: bool = False
    inclusive: bool = False

    @classmethod
    def earliest(cls) -> ReceivePosition:
        return cls()

    @classmethod
    def newest(cls) -> ReceivePosition:
        """Only events enqueued after the receiver opened."""
        return cls(latest=True)

    @classmethod
    def after(cls, sequence_number: int) -> ReceivePosition:
        """Right after a checkpoint: the checkpointed event was processed already."""
        return cls(sequence_number=sequence_number)

    @classmethod
    def at(cls, sequence_number: int) -> ReceivePosition:
        return cls(sequence_number=sequence_number, inclusive=True)

    @classmethod
    def since(cls, enqueued_time: datetime.datetime) -> ReceivePosition:
        return cls(enqueued_time=enqueued_time, inclusive=True)

    def sdk_position(self) -> tuple[str | int | datetime.datetime, bool]:
        """The SDK's ``event_position`` and ``event_position_inclusive``."""
        if self.sequence_number is not None:
            return self.sequence_number, self.inclusive
        if self.enqueued_time is not None:
            return self.enqueued_time, self.inclusive
        if self.latest:
            return "@latest", False
        # Offset -1, exclusive: the very first event of the partition.
        return "-1", False
