"""``eventhub_balancer.testing``: the handler test harness, under the name a team looks for.

A team that writes a handler depends on ``eventhub_balancer`` and wants its tests to read
``from eventhub_balancer import testing``, as with other libraries' harnesses; the harness
itself lives beside the runtime it imitates (`eventhub_balancer.consumer.testing`), so this
module only re-exports it: the same objects, so either import path gives the same results.

::

    from eventhub_balancer import testing

    def test_orders_are_counted():
        outcome = testing.run(pipeline.process, testing.events([{"id": 1}, {"id": 2}]))
        assert outcome.checkpointed

`run_spark` needs the ``spark`` extra (pyspark) only when called.
"""

from __future__ import annotations

from eventhub_balancer.consumer.testing import (
    FIRST_ENQUEUED,
    Outcome,
    TriggerOutcome,
    batch_context,
    events,
    run,
    run_async,
    run_spark,
)

__all__ = [
    "FIRST_ENQUEUED",
    "Outcome",
    "TriggerOutcome",
    "batch_context",
    "events",
    "run",
    "run_async",
    "run_spark",
]
