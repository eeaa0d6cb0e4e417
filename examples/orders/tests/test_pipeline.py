"""Tests of the example handler with eventhub_balancer.testing: no Event Hubs, no Kubernetes.
Run them with ``python -m pytest examples/orders`` (or ``python -m pytest`` in this project)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from eventhub_balancer import testing
from eventhub_balancer.consumer import BatchContext, Event, Handler
from orders import pipeline

ORDERS: list[dict[str, object]] = [
    {"id": 1, "amount": 10.0, "status": "paid"},
    {"id": 2, "amount": 2.5, "status": "paid"},
    {"id": 3, "amount": 4.0},
]


def test_the_handler_has_the_handler_shape() -> None:
    handler: Handler = pipeline.process  # mypy checks this line as ehb consume checks at start
    assert handler is pipeline.process


def test_a_batch_is_totalled_and_checkpointed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=pipeline.__name__)
    batch = testing.events(ORDERS, partition="3", first_sequence_number=100)
    outcome = testing.run(pipeline.process, batch, epoch=7)
    assert outcome.checkpointed
    assert outcome.context.partition == "3"
    assert (outcome.context.first_sequence_number, outcome.context.last_sequence_number) == (
        100,
        102,
    )
    assert "partition 3: 3 orders (sequence numbers 100-102, epoch 7, attempt 1)" in caplog.text
    assert pipeline.totals(batch).amount_by_status == {"paid": 12.5, "new": 4.0}


def test_a_bad_event_fails_the_batch_so_the_policy_retries_it() -> None:
    bodies: list[str | dict[str, object]] = [*ORDERS, "not json"]
    batch = testing.events(bodies, partition="3", first_sequence_number=100)
    outcome = testing.run(pipeline.process, batch)
    assert not outcome.checkpointed
    assert isinstance(outcome.error, pipeline.NotAnOrder)
    assert "sequence number 103" in str(outcome.error)
    assert outcome.failed_partitions == {"3"}


def test_a_revocation_cancels_a_slow_async_handler() -> None:
    import asyncio

    async def slow(events: Sequence[Event], context: BatchContext) -> None:
        await asyncio.sleep(60)

    outcome = testing.run(slow, testing.events(ORDERS), revoke_after=0.05)
    assert outcome.revoked
    assert not outcome.checkpointed
