"""`tracking.LagWarnings`: a watch that lags is one warning a minute, not one per consumer.

Behind a ConfigMap watch that lags, every consumer whose write is not echoed in time notices
it on its own (`rosters.Roster.overdue`), every `rosters.ECHO_SECONDS` while the lag lasts:
at 300 consumers the operator logged 300 warnings at once, and again every 5 s.
"""

from __future__ import annotations

import logging

import pytest

from eventhub_balancer.handlers.cache import shelves, tracking
from tests.handlers.test_caching import Clock


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_lag_every_consumer_notices_is_one_warning_a_minute_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    lag = tracking.LagWarnings(clock)
    with caplog.at_level(logging.DEBUG, logger=tracking.__name__):
        for i in range(300):
            clock.now = i / 100
            lag.noticed(("shop", f"c{i}"), {shelves.CONFIGMAPS})
        assert warnings(caplog) == [
            "the watch of configmaps did not deliver the operator's own writes within 5 s: "
            "1 consumer read afresh (a watch that lags is warned of at most once a minute)"
        ]
        # Each consumer is still named, at DEBUG.
        assert sum("shop/c" in r.getMessage() for r in caplog.records) == 300
        caplog.clear()
        clock.now = 59.0
        lag.report()
        assert warnings(caplog) == []
        clock.now = 61.0
        lag.report()  # the minute is over: what was held back is counted
        assert warnings(caplog) == [
            "the watch of configmaps did not deliver the operator's own writes within 5 s: "
            "299 consumers read afresh in the last 61 s (a watch that lags is warned of at "
            "most once a minute)"
        ]
        caplog.clear()
        lag.report()
        assert warnings(caplog) == []  # nothing new: nothing to say


def test_each_kind_is_warned_of_on_its_own(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = tracking.LagWarnings(clock)
    with caplog.at_level(logging.WARNING, logger=tracking.__name__):
        lag.noticed(("shop", "a"), {shelves.CONFIGMAPS, shelves.CONSUMER})
        lag.noticed(("shop", "b"), {shelves.CONSUMER})
    assert [m.split(" did")[0] for m in warnings(caplog)] == [
        "the watch of configmaps",
        "the watch of consumer",
    ]
