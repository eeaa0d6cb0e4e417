"""Order totals per partition: the plain-Python example handler (no Spark, no JVM).

Run it in a consumer pod with::

    ehb consume --handler orders.pipeline:process

(the image built by examples/orders/Dockerfile installs this project's wheel beside the
runtime; from a checkout, ``--handler-path examples/orders`` finds it instead). Each call
hands over one micro-batch of one partition; the runtime checkpoints after ``process``
returns, so a batch is only ever done once it is logged. An event that is not an order (not
JSON, or without ``id`` and a numeric ``amount``) raises :class:`NotAnOrder`: the batch is
retried, then parked or dead-lettered by the EventHubConsumer's failure policy, and the
partition's other batches wait for it (order within a partition is kept).

Its tests (``examples/orders/tests/test_pipeline.py``) run it with ``eventhub_balancer.testing``,
without Event Hubs or Kubernetes: ``python -m pytest examples/orders``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

from eventhub_balancer.consumer import BatchContext, Event

logger = logging.getLogger(__name__)


class NotAnOrder(ValueError):
    """An event whose body is not an order: retried, then dead-lettered by the policy."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Totals:
    """One batch's orders: how many, and the amount per status."""

    orders: int
    amount_by_status: dict[str, float]


def parse(event: Event) -> tuple[str, float]:
    """(status, amount) of one order event; raises `NotAnOrder` with the sequence number."""
    try:
        order = json.loads(event.body)
        amount = float(order["amount"])
        if "id" not in order:  # an order without an id cannot be traced: refuse it
            raise KeyError("id")
    except (ValueError, TypeError, KeyError) as e:
        raise NotAnOrder(
            f"partition {event.partition} sequence number {event.sequence_number}: not an "
            f"order ({type(e).__name__}: {e})"
        ) from e
    return str(order.get("status", "new")), amount


def totals(events: Sequence[Event]) -> Totals:
    """Add up a batch (pure: the part worth most of the tests)."""
    by_status: dict[str, float] = {}
    for event in events:
        status, amount = parse(event)
        by_status[status] = by_status.get(status, 0.0) + amount
    return Totals(orders=len(events), amount_by_status=by_status)


def process(events: Sequence[Event], context: BatchContext) -> None:
    """The handler: ``eventhub_balancer.consumer.Handler``."""
    summary = totals(events)
    logger.info(
        "partition %s: %d orders (sequence numbers %d-%d, epoch %d, attempt %d): %s",
        context.partition,
        summary.orders,
        context.first_sequence_number,
        context.last_sequence_number,
        context.epoch,
        context.attempt,
        json.dumps(summary.amount_by_status, sort_keys=True),
    )
