"""What the operator's log and Events say of Event Hubs or the checkpoint store failing for
an hour, on fake time (looptime): the fault when it starts or its reason changes, a reminder
every 10 minutes, and one line and one Normal Event when it answers again.

The checkpoint store refusing the operator (403, throttling) for an hour used to leave no
line at all in the operator's log, and neither it nor Event Hubs said in the log when it
answered again; the store's recovery had no Event either, while Event Hubs' had one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from eventhub_balancer import errors
from tests.handlers import test_daemons as td
from tests.handlers.test_daemons import running as running  # the fixture

pytestmark = pytest.mark.looptime

HOUR = 3600.0
STORE = errors.CheckpointStoreUnreachable(
    "checkpoint container 'checkpoints': HttpResponseError (403 AuthorizationFailure)"
)
HUB = errors.EventHubUnreachable(
    "Event Hub 'orders' in shop.servicebus.windows.net: unreachable (ConnectError: refused)"
)


#: Cycles 30 s apart: what a fault's retries do stands out from the cycles' own pace.
SPEC = {**td.SPEC, "balancing": {"intervalSeconds": 30}}


def said(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and text in r.getMessage() and r.name.startswith("eventhub_bal")
    ]


async def failing_for_an_hour(
    running: Callable[..., td.Daemon],
    caplog: pytest.LogCaptureFixture,
    dependency: str,
    error: errors.EventHubBalancerError,
) -> td.Daemon:
    """A steady daemon whose ``dependency`` ("hub" or "store") then fails with ``error`` for
    an hour; the log captured from when it starts failing."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec=SPEC)
    await daemon.until(60)
    caplog.clear()
    if dependency == "store":
        daemon.hubs.store.failure = error
    else:
        daemon.hubs.failure = error
    await daemon.until(60 + HOUR)
    return daemon


@pytest.mark.parametrize(
    ("dependency", "error", "recovered"),
    [
        ("store", STORE, "CheckpointStoreReachable"),
        ("hub", HUB, "EventHubReachable"),
    ],
)
async def test_an_hour_long_dependency_fault_is_logged_at_a_bounded_pace_and_its_end_said(
    running: Callable[..., td.Daemon],
    caplog: pytest.LogCaptureFixture,
    dependency: str,
    error: errors.EventHubBalancerError,
    recovered: str,
) -> None:
    daemon = await failing_for_an_hour(running, caplog, dependency, error)
    warned = said(caplog, logging.WARNING, str(error))
    assert 1 <= len(warned) <= 20  # the backoff's pace: up to 5 minutes apart
    assert all(line.startswith("shop/orders: ") for line in warned)
    assert not [r for r in caplog.records if r.exc_info]

    caplog.clear()
    before = len(daemon.kube.events)
    daemon.hubs.store.failure = daemon.hubs.failure = None
    await daemon.until(60 + HOUR + 600)  # the longest backoff, and a cycle
    ended = said(caplog, logging.INFO, "again")
    assert len(ended) == 1
    assert ended[0].startswith("shop/orders: ")
    assert said(caplog, logging.WARNING, "") == []
    normal = [e for e in daemon.kube.events[before:] if e["type"] == "Normal"]
    assert [e["reason"] for e in normal] == [recovered]


MISSING_HUB = errors.EventHubNotFound(
    "Event Hub 'orders' in shop.servicebus.windows.net does not exist: fix spec.eventHub.name"
)
MISSING_CONTAINER = errors.CheckpointContainerNotFound(
    "checkpoint container 'checkpoints' does not exist: create it"
)


@pytest.mark.parametrize(
    ("dependency", "error"), [("hub", MISSING_HUB), ("store", MISSING_CONTAINER)]
)
async def test_a_standing_fault_is_said_when_it_starts_and_reminded_every_ten_minutes(
    running: Callable[..., td.Daemon],
    caplog: pytest.LogCaptureFixture,
    dependency: str,
    error: errors.EventHubBalancerError,
) -> None:
    # A hub that does not exist is asked again every 30 s for as long as it lasts: each
    # attempt was a warning, 120 an hour for one consumer, as many for each of 50 that share
    # the fault. The log says it when it starts, then every 10 minutes; the attempts in
    # between are at DEBUG.
    daemon = await failing_for_an_hour(running, caplog, dependency, error)
    warned = said(caplog, logging.WARNING, str(error))
    assert 1 <= len(warned) <= 7  # when it starts, then at most every 10 minutes
    assert "still failing" not in warned[0]
    assert all("still failing" in line for line in warned[1:])

    caplog.clear()
    daemon.hubs.store.failure = daemon.hubs.failure = None
    await daemon.until(60 + HOUR + 600)
    ended = said(caplog, logging.INFO, "again")
    assert len(ended) == 1
    assert "failed attempts over" in ended[0]


async def test_a_fault_whose_reason_changes_is_said_again(
    running: Callable[..., td.Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec=SPEC)
    await daemon.until(60)
    caplog.clear()
    daemon.hubs.failure = HUB
    await daemon.until(600)
    daemon.hubs.failure = MISSING_HUB
    await daemon.until(900)
    assert len(said(caplog, logging.WARNING, str(HUB))) == 1
    assert len(said(caplog, logging.WARNING, str(MISSING_HUB))) == 1


async def test_a_standing_fault_whose_words_change_is_said_again_an_outages_is_not(
    running: Callable[..., td.Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    """Someone mends one thing and the next is wrong (the Secret made, its key misspelt; a hub
    renamed to another that does not exist either): one reason, new words, and the log said
    nothing of it for 10 minutes. An outage's words may change at each attempt (the host
    that refused): only its reason is news."""
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec=SPEC)
    await daemon.until(60)
    caplog.clear()
    daemon.hubs.failure = MISSING_HUB
    await daemon.until(300)
    renamed = errors.EventHubNotFound(
        "Event Hub 'order' in shop.servicebus.windows.net does not exist: fix spec.eventHub.name"
    )
    daemon.hubs.failure = renamed
    await daemon.until(540)  # within the first 10 minutes: no reminder is due
    assert len(said(caplog, logging.WARNING, str(MISSING_HUB))) == 1
    assert len(said(caplog, logging.WARNING, str(renamed))) == 1

    daemon.hubs.failure = None
    await daemon.until(1200)
    caplog.clear()
    daemon.hubs.failure = HUB
    await daemon.until(1500)
    elsewhere = errors.EventHubUnreachable(
        "Event Hub 'orders' in shop.servicebus.windows.net: unreachable (ConnectError: reset)"
    )
    daemon.hubs.failure = elsewhere
    await daemon.until(1740)
    assert len(said(caplog, logging.WARNING, f"Event Hubs: {HUB}")) == 1
    assert said(caplog, logging.WARNING, f"Event Hubs: {elsewhere}") == []


async def test_a_fault_of_one_attempt_is_said_in_the_singular_when_it_ends(
    running: Callable[..., td.Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec=SPEC)
    await daemon.until(60)
    caplog.clear()
    daemon.hubs.failure = HUB
    await daemon.until(75)  # the next listing fails, once
    assert len(said(caplog, logging.WARNING, str(HUB))) == 1
    daemon.hubs.failure = None
    await daemon.until(700)
    (ended,) = said(caplog, logging.INFO, "again")
    assert "(it failed with " in ended
    assert "; 1 failed attempt over " in ended


async def test_a_missing_container_is_taken_up_within_30_s_of_its_creation(
    running: Callable[..., td.Daemon],
) -> None:
    # Someone creates it, then waits for the consumer to take it up, as for a missing hub or
    # Secret: it was asked at the outage's pace, up to 5 minutes apart, and the condition
    # went on saying it does not exist for as long after it was there.
    daemon = running("a", "b", spec=SPEC)
    await daemon.until(60)
    daemon.hubs.store.failure = MISSING_CONTAINER
    await daemon.until(60 + HOUR)

    def reachable() -> dict[str, str]:
        conditions = daemon.kube.status(td.NS, td.NAME)["conditions"]
        return next(c for c in conditions if c["type"] == "CheckpointStoreReachable")

    assert reachable()["status"] == "False"
    daemon.hubs.store.failure = None
    await daemon.until(60 + HOUR + 30 + 30)  # the longest wait, and a cycle
    assert reachable()["status"] == "True"
