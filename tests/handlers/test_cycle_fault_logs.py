"""What the operator's log says of a consumer whose cycles keep failing, over an hour of fake
time (looptime): the fault once when it starts, a reminder at a bounded pace while it lasts,
and one line when the cycles succeed again.

A write the API server refuses for good (403 by RBAC, 422 by an admission policy) or a storm
of conflicts fails every cycle of the consumer; the daemon retries at most once a minute. It
used to log the same warning at each retry, 66 lines an hour a consumer (66,000 an hour for
a thousand consumers refused together), and nothing when the fault ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import cyclefaults, registering
from tests.handlers import test_daemons as td
from tests.handlers.test_daemons import running as running  # the fixture

pytestmark = pytest.mark.looptime

HOUR = 3600.0
REFUSALS: dict[str, errors.EventHubBalancerError] = {
    "forbidden": errors.Forbidden(
        "patch EventHubConsumer shop/orders status: forbidden (Forbidden); grant the "
        "operator's ServiceAccount access"
    ),
    "rejected": errors.ApiRejected(
        "patch EventHubConsumer shop/orders status: rejected (422: denied by policy no-status)"
    ),
    "conflicts": errors.Conflict("patch EventHubConsumer shop/orders status: conflict (Conflict)"),
}


#: Cycles 30 s apart: what a fault's retries do stands out from the cycles' own pace.
SPEC = {**td.SPEC, "balancing": {"intervalSeconds": 30}}


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name in (registering.logger.name, cyclefaults.logger.name) and r.levelno == level
    ]


@pytest.mark.parametrize("refusal", list(REFUSALS))
async def test_a_write_refused_for_an_hour_is_said_once_then_reminded_then_ended(
    running: Callable[..., td.Daemon], caplog: pytest.LogCaptureFixture, refusal: str
) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec=SPEC)
    await daemon.until(60)
    caplog.clear()
    daemon.kube.fail("patch_consumer_status", REFUSALS[refusal], times=10**6)
    daemon.kube.set_ready(td.NS, "a", ready=False, since=td.clock())  # a cycle writes status
    daemon.deliver("pod")
    await daemon.until(60 + HOUR)
    warned = lines(caplog, logging.WARNING)
    attempts = daemon.operator.metrics.cycles.labels(td.NS, td.NAME, REFUSALS[refusal].reason)
    assert attempts._value.get() > 60  # retried at least once a minute all along
    assert 1 <= len(warned) <= 1 + HOUR / cyclefaults.REMIND_SECONDS
    assert all(line.startswith("shop/orders: ") for line in warned)
    assert str(REFUSALS[refusal]) in warned[0]
    assert "still failing" in warned[-1]
    assert lines(caplog, logging.INFO) == []

    caplog.clear()
    daemon.kube._failures.clear()
    await daemon.until(60 + HOUR + 120)
    ended = lines(caplog, logging.INFO)
    assert len(ended) == 1
    assert ended[0].startswith("shop/orders: cycles succeed again after ")
    assert lines(caplog, logging.WARNING) == []


async def test_a_single_conflict_is_no_fault_and_no_recovery(
    running: Callable[..., td.Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    """The conflict every consumer's first write may meet is retried at once, quietly: no
    warning, and so no line saying it ended."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec=SPEC)
    await daemon.until(60)
    caplog.clear()
    daemon.kube.fail("patch_consumer_status", REFUSALS["conflicts"], times=1)
    daemon.kube.set_ready(td.NS, "a", ready=False, since=td.clock())
    daemon.deliver("pod")
    await daemon.until(200)
    assert lines(caplog, logging.WARNING) == []
    assert lines(caplog, logging.INFO) == []
