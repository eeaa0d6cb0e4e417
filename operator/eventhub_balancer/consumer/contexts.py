"""What a user's handler receives besides the events: the batch's context.

The events are ``adapters.deliveries.ReceivedEvent`` (what the receive adapter produces),
re-exported here so that handler authors import both names from one place; handlers know
it by its public name ``eventhub_balancer.consumer.Event``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from eventhub_balancer.adapters import deliveries

ReceivedEvent = deliveries.ReceivedEvent
#: The public name in handler code (``from eventhub_balancer.consumer import Event``).
Event = deliveries.ReceivedEvent


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchContext:
    """Where a micro-batch comes from; the same for every event in it."""

    partition: str
    #: The owner epoch this pod holds the partition with (grows with every owner change).
    epoch: int
    #: The EventHubConsumer's name, and this pod's name.
    consumer: str
    pod: str
    first_sequence_number: int
    last_sequence_number: int
    #: How many events the batch holds.
    size: int
    #: The SparkSession in Spark mode, None in plain mode.
    spark: Any = None
    #: Attempt number of this batch: 1 the first time, more after a handler error.
    attempt: int = 1
