"""What a partition worker needs of the world outside: the checkpoint store and the receiver.

The worker (``consumer.partitions``) sees only these protocols. ``consumer.connections``
fills them with the real adapters (``adapters.checkpointing``, ``adapters.receiving``); the
unit tests fill them with in-memory fakes on fake time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from eventhub_balancer.adapters import deliveries
from eventhub_balancer.contracts import checkpointblobs


class Checkpoint(Protocol):
    @property
    def sequence_number(self) -> int: ...

    @property
    def deaths(self) -> checkpointblobs.Deaths | None: ...

    @property
    def epoch(self) -> int: ...

    @property
    def owner_id(self) -> str: ...


class Checkpoints(Protocol):
    """What a worker needs of the checkpoint store (``adapters.checkpointing``)."""

    async def fence(self, partition: str, epoch: int, *, start: Any) -> Checkpoint: ...

    async def update(self, partition: str, *, offset: str, sequence_number: int) -> Checkpoint: ...

    async def keep(self, partition: str) -> Checkpoint | None: ...

    async def record_deaths(
        self, partition: str, deaths: checkpointblobs.Deaths | None
    ) -> Checkpoint: ...

    def release(self, partition: str) -> None: ...


class DeadLetters(Protocol):
    """Where a batch goes that the handler failed on ``maxAttempts`` times
    (``adapters.deadletters``): the write returns once the batch is durable."""

    async def write(
        self,
        events: Sequence[deliveries.ReceivedEvent],
        *,
        error: str,
        attempts: int,
        pod: str,
        epoch: int,
    ) -> str:
        """Store the batch; returns the name it was stored under."""
        ...


class Receiver(Protocol):
    """What a worker needs of a partition receiver (``adapters.receiving``)."""

    @property
    def last_enqueued(self) -> deliveries.LastEnqueued | None: ...

    def start(self) -> None: ...

    async def next_batch(self, *, max_size: int, max_wait: float) -> deliveries.ReceivedBatch: ...

    async def close(self) -> None: ...


#: Opens a receiver for (partition, epoch) at a position.
ReceiverFactory = Callable[[str, int, deliveries.ReceivePosition], Receiver]
#: The start position to seed a missing checkpoint with (resolved lazily: may ask Event Hubs).
StartResolver = Callable[[str], Awaitable[Any]]
#: Checks a fenced checkpoint against the partition's end: None when it names an event of the
#: stream (or before it), else the checkpoint moved back to the start position.
PositionCheck = Callable[[str, Checkpoint], Awaitable[Checkpoint | None]]
