"""What a user's handler receives besides the events: the batch's context.

The events are ``adapters.deliveries.ReceivedEvent`` (what the receive adapter produces),
re-exported here so that handler authors import both names from one place; handlers know
it by its public name ``eventhub_balancer.consumer.Event``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from eventhub_balancer.adapters import deliveries

if TYPE_CHECKING:  # pyspark is an optional extra; the type is for mypy only
    from pyspark.sql import SparkSession

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
    #: Attempt number of this batch: 1 the first time, more after a handler error.
    attempt: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionRange:
    """One partition's events in a Spark trigger: what an idempotent sink keys its output by.

    A trigger that is processed again after a crash starts each partition at the same
    checkpoint, so ``(partition, first_sequence_number)`` names the same output again (its
    events may be more or fewer this time; never others).
    """

    partition: str
    #: The owner epoch this pod holds the partition with.
    epoch: int
    first_sequence_number: int
    last_sequence_number: int
    #: How many of the trigger's events come from this partition.
    size: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class TriggerContext:
    """What a Spark handler gets beside its DataFrame: one trigger over the pod's partitions."""

    #: The pod's trigger number: 1 for the first trigger of this process, then counting up.
    #: It starts again at 1 after a restart; key durable output by the partition ranges.
    batch_id: int
    consumer: str
    pod: str
    #: Every partition with events in this trigger, by partition id.
    partitions: Mapping[str, PartitionRange]
    #: How many events the trigger holds, over all its partitions.
    size: int
    #: The SparkSession (classic or Spark Connect; pyspark types both as this class). The
    #: runtime always passes one: not Optional, so ``context.spark.sql(...)`` passes
    #: ``mypy --strict`` in a handler's project.
    spark: SparkSession
    #: 1 the first time these batches reach the handler; more after a failed trigger.
    attempt: int = 1
