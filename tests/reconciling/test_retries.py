"""`deadlines.Backoff`: the pacing of attempts to reach a failing dependency, plain arithmetic."""

from __future__ import annotations

from eventhub_balancer.reconciling import deadlines


def test_the_backoff_doubles_from_the_interval_up_to_its_maximum() -> None:
    backoff, delays = deadlines.Backoff(), []
    for attempt in range(12):
        backoff = deadlines.after_failure(backoff, wall=1000.0 + attempt, base=5.0)
        delays.append(backoff.delay)
    assert delays[:7] == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0]
    assert set(delays[7:]) == {deadlines.MAX_BACKOFF_SECONDS}


def test_a_shorter_longest_delay_caps_the_doubling() -> None:
    backoff, delays = deadlines.Backoff(), []
    for attempt in range(6):
        backoff = deadlines.after_failure(
            backoff, wall=1000.0 + attempt, base=5.0, longest=deadlines.MISSING_BACKOFF_SECONDS
        )
        delays.append(backoff.delay)
    assert delays == [5.0, 10.0, 20.0, 30.0, 30.0, 30.0]


def test_an_attempt_waits_until_the_retry_time() -> None:
    backoff = deadlines.after_failure(deadlines.Backoff(), wall=100.0, base=5.0)
    assert backoff.waiting(104.9)
    assert not backoff.waiting(105.0)
    assert not deadlines.Backoff().waiting(0.0)


def test_the_store_is_probed_once_a_minute_and_at_once_when_never_read() -> None:
    assert deadlines.probe_due(None, wall=0.0)
    assert not deadlines.probe_due(100.0, wall=159.9)
    assert deadlines.probe_due(100.0, wall=160.0)
