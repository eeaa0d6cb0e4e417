"""The consumer pod's runtime: the partitions the operator assigns, processed by your handler.

A handler is ``process(events, context)`` (plain) or ``process(df, context)`` (Spark mode),
sync or async; :class:`Event` (the same class as :class:`ReceivedEvent`) and
:class:`BatchContext` are its argument types. The runtime checkpoints only after the handler
returned, releases partitions in an ordered hand-off, and serves /healthz, /readyz and
/metrics. Run it with ``ehb consume``.
"""

from eventhub_balancer.consumer.contexts import BatchContext, Event, ReceivedEvent

__all__ = ["BatchContext", "Event", "ReceivedEvent"]
