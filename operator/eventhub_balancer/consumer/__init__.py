"""The consumer pod's runtime: the partitions the operator assigns, processed by your handler.

A handler is ``process(events, context)`` (plain, sync or async; :class:`Event`, the same
class as :class:`ReceivedEvent`, and :class:`BatchContext` are its argument types) or
``process(df, context)`` (Spark mode, sync, once per trigger over all the pod's partitions,
with a :class:`TriggerContext`; raise :class:`PartitionsFailed` to name failing partitions).
:class:`Handler` and :class:`SparkHandler` are the two as protocols, for mypy, and
``ehb consume`` checks a handler's signature against its mode's at start.
The runtime checkpoints only after the handler returned, releases partitions in an ordered
hand-off, and serves /healthz, /readyz and /metrics. Run it with ``ehb consume``.
"""

from eventhub_balancer.consumer.contexts import (
    BatchContext,
    Event,
    PartitionRange,
    ReceivedEvent,
    TriggerContext,
)
from eventhub_balancer.consumer.partitionfailures import PartitionsFailed
from eventhub_balancer.consumer.protocols import Handler, SparkHandler

__all__ = [
    "BatchContext",
    "Event",
    "Handler",
    "PartitionRange",
    "PartitionsFailed",
    "ReceivedEvent",
    "SparkHandler",
    "TriggerContext",
]
