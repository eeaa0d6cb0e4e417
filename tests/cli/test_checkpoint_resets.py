"""``ehb checkpoints reset``: a time target no datetime can hold is a usage error naming the
flag, before the consumer is read, not an OverflowError.

The consumer, its hub and its container are fakes (`pausedconsumers`); the resets against
Azurite and the Event Hubs emulator are in tests/adapters/wire/test_checkpoint_reset.py.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import sys

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointresets
from eventhub_balancer.cli import checkpointresets as checkpointresets_cli
from tests.support import pausedconsumers
from tests.support.pausedconsumers import ehb

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> pausedconsumers.PausedConsumer:
    return pausedconsumers.install(monkeypatch)


def reset(capsys: pytest.CaptureFixture[str], *target: str) -> tuple[int, str, str]:
    return ehb(capsys, "checkpoints", "reset", "orders", "-n", "shop", *target, "--dry-run")


@pytest.mark.parametrize(
    "duration",
    [
        "999999d",  # a timedelta, but now less it is before the year 1
        "99999999999d",  # past timedelta's 999,999,999 days
        "1" * 5000 + "d",  # past the digits int() reads
    ],
)
def test_a_duration_reaching_before_the_year_1_is_a_usage_error(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str], duration: str
) -> None:
    status, out, err = reset(capsys, "--by-duration", duration)
    assert (status, out) == (2, "")
    assert err.startswith("ehb: error: --by-duration: ")
    assert err.strip().endswith(
        "reaches back before the year 1: give a shorter duration, or --to-earliest to replay "
        "everything the partition retains"
    )


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_time_outside_the_years_in_utc_is_a_usage_error(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str], when: str
) -> None:
    status, out, err = reset(capsys, "--to-datetime", when)
    assert (status, out) == (2, "")
    assert err == (
        f"ehb: error: --to-datetime: {when!r} is outside the years 1 to 9999 in UTC: give a "
        "time within them\n"
    )


def test_a_time_in_the_future_is_a_usage_error(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str]
) -> None:
    """It moved each partition to its end, so the events enqueued until that time were still
    processed, though they are before it."""
    when = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    status, out, err = reset(capsys, "--to-datetime", when)
    assert (status, out) == (2, "")
    assert err.startswith(f"ehb: error: --to-datetime: {when!r} is after now (")
    assert err.endswith(
        "a reset moves only to events already enqueued, and the ones enqueued before it would "
        "still be processed; give a past time, or --to-latest to skip every event so far\n"
    )
    assert consumer.container.opened == 0


def test_the_target_of_a_time_at_now_is_that_time() -> None:
    given = dict.fromkeys(checkpointresets_cli.TARGETS) | {"to_datetime": NOW.isoformat()}
    args = argparse.Namespace(**given)
    assert checkpointresets_cli.target_of(args, now=NOW) == checkpointresets.ToDatetime(when=NOW)
    with pytest.raises(errors.InvalidInput, match="is after now"):
        checkpointresets_cli.target_of(args, now=NOW - datetime.timedelta(seconds=1))


def test_a_negative_sequence_number_says_what_to_give(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said only ``-5 is negative``."""
    status, out, err = reset(capsys, "--to-sequence", "-5")
    assert (status, out) == (2, "")
    assert err == (
        "ehb: error: --to-sequence: -5 is negative: give the sequence number of the next event "
        "to process (0 or more), or --to-earliest to replay everything the partition retains\n"
    )
    assert consumer.container.opened == 0


def test_the_longest_duration_a_date_holds_is_taken() -> None:
    longest = NOW - datetime.datetime.min.replace(tzinfo=datetime.UTC)
    when = checkpointresets.time_before(NOW, f"{longest.days}d")
    assert when.year == 1
    with pytest.raises(errors.InvalidInput, match="--by-duration"):
        checkpointresets.time_before(NOW, f"{longest.days + 1}d")


def test_a_time_is_held_in_utc() -> None:
    when = checkpointresets.parse_datetime("0001-01-01T00:30:00-01:00")
    assert (when.tzinfo, when) == (
        datetime.UTC,
        datetime.datetime(1, 1, 1, 1, 30, tzinfo=datetime.UTC),
    )


@pytest.mark.parametrize(
    ("command", "change"),
    [
        (["reset", "orders", "--shift-by", "-3"], {"target": "--shift-by -3"}),
        (["reset", "orders", "--to-latest"], {"target": "--to-latest"}),
        (["import", "orders", "-"], {"file": "-"}),
    ],
)
def test_the_json_names_the_consumer_alone(
    consumer: pausedconsumers.PausedConsumer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    change: dict[str, str],
) -> None:
    """``consumer`` is the namespace/name a script looks the consumer up by; it held the
    table's header (``shop/orders --shift-by -3``, ``shop/orders import -``), which changes
    with every run. What was asked is a key of its own."""
    checkpoints = [{"partition": "0", "sequenceNumber": 5, "offset": ""}]
    export = {"kind": "EventHubCheckpoints", "version": 1, "checkpoints": checkpoints}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(export)))
    status, out, err = ehb(capsys, "checkpoints", *command, "-n", "shop", "--dry-run", "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document["consumer"] == "shop/orders"
    assert {key: document[key] for key in change} == change
