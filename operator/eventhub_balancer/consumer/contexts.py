"""What a user's handler receives besides the events: the batch's context.

``Event`` lives in ``adapters.receiving`` (it is what the receive adapter produces) and is
re-exported here so that handler authors import both names from one place.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from eventhub_balancer.adapters import receiving

Event = receiving.Event


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
