"""The dead-letter write of a batch the failure policy gave up on (`attempts`), retried with
backoff until it is durable: only then may the checkpoint pass the batch."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import ports

logger = logging.getLogger(__name__)


async def write_until_durable(
    dead_letters: ports.DeadLetters,
    events: Sequence[deliveries.ReceivedEvent],
    *,
    error: str,
    attempts: int,
    pod: str,
    epoch: int,
    backoff: float,
    backoff_max: float,
    sleep: Callable[[float], Awaitable[bool]],
    failed: Callable[[str], None],
) -> str | None:
    """The dead letter's name once it is durable. Each failed write is told to ``failed``
    (the partition's report) and waited out with ``sleep``, doubling from ``backoff`` up to
    ``backoff_max``; None when ``sleep`` says the partition was released meanwhile (then
    nothing passes the batch, and the next owner sees it)."""
    partition = events[0].partition
    delay = backoff
    while True:
        try:
            return await dead_letters.write(
                events, error=error, attempts=attempts, pod=pod, epoch=epoch
            )
        except (errors.TransientError, errors.ConfigurationError) as e:
            failure = f"dead-letter write failed: {e}"
            failed(failure)
            logger.warning("partition %s: %s; retrying in %.1f s", partition, failure, delay)
            if not await sleep(delay):
                return None
            delay = min(delay * 2, backoff_max)
