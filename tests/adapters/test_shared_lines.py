"""A failure that several partitions of a pod meet at once is said once for all of them
(`adapters.sharedlines`): one partition failing alone is said as it comes, a group is said
when it forms, when it doubles and every `REPEAT_S` seconds, and each partition's own line
goes to DEBUG meanwhile. On a clock of the test's own."""

from __future__ import annotations

import logging

import pytest

from eventhub_balancer.adapters import sharedlines
from tests.support.clocks import Clock

LOG = logging.getLogger("tests.sharedlines")
TOGETHER = "%d partitions fail together, last: %s"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def lines(clock: Clock) -> sharedlines.SharedLines:
    return sharedlines.SharedLines(LOG, TOGETHER, clock=clock)


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """The lines at WARNING and above, then forgotten."""
    out = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    caplog.clear()
    return out


def fail(lines: sharedlines.SharedLines, partition: str) -> None:
    lines.say(partition, logging.WARNING, "partition %s: refused", partition)


@pytest.fixture(autouse=True)
def debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOG.name)


def test_one_partition_failing_alone_is_said_every_time(
    lines: sharedlines.SharedLines, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(5):
        fail(lines, "3")
        clock.now += 10.0
    assert said(caplog) == [("WARNING", "partition 3: refused")] * 5


def test_partitions_failing_together_are_said_when_the_group_forms_and_doubles(
    lines: sharedlines.SharedLines, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(3):  # every partition fails three times, a second apart
        for p in range(16):
            fail(lines, str(p))
            clock.now += 1.0
    loud = said(caplog)
    assert loud[0] == ("WARNING", "partition 0: refused")  # alone, as far as anyone knows
    counts = [text.split(" partitions", 1)[0] for _, text in loud[1:]]
    assert counts == ["2", "4", "8", "16"]
    assert loud[-1][1].startswith("16 partitions fail together, last: partition 15: refused")
    assert "said again when twice as many fail, or every 300 s" in loud[-1][1]
    # Each partition's own line is still there, at DEBUG.
    fail(lines, "7")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "partition 7: refused")
    ]


def test_a_standing_group_is_said_again_every_repeat(
    lines: sharedlines.SharedLines, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    for p in "01":
        fail(lines, p)
    said(caplog)
    for _ in range(int(sharedlines.REPEAT_S / 10) * 2):  # 600 s of both failing
        clock.now += 10.0
        for p in "01":
            fail(lines, p)
    assert [text[:34] for _, text in said(caplog)] == ["2 partitions fail together, last: "] * 2


def test_partitions_failing_a_window_apart_are_each_said_alone(
    lines: sharedlines.SharedLines, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    for p in range(4):
        fail(lines, str(p))
        clock.now += sharedlines.WINDOW_S
    assert said(caplog) == [("WARNING", f"partition {p}: refused") for p in range(4)]


def test_a_group_that_forms_again_after_quiet_is_said_afresh(
    lines: sharedlines.SharedLines, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    for p in range(8):
        fail(lines, str(p))
    said(caplog)
    clock.now += sharedlines.WINDOW_S  # the outage ended: every line of it is out of the window
    for p in "01":
        fail(lines, p)
    assert said(caplog) == [
        ("WARNING", "partition 0: refused"),
        ("WARNING", TOGETHER % (2, "partition 1: refused") + sharedlines.SAID_AGAIN % 300),
    ]


def test_the_caller_may_give_the_time(caplog: pytest.LogCaptureFixture) -> None:
    lines = sharedlines.SharedLines(LOG, TOGETHER, clock=lambda: pytest.fail("not asked"))
    lines.say("0", logging.ERROR, "partition %s: x", "0", now=5.0)
    lines.say("1", logging.ERROR, "partition %s: x", "1", now=5.0 + sharedlines.WINDOW_S)
    assert said(caplog) == [("ERROR", "partition 0: x"), ("ERROR", "partition 1: x")]


def test_the_caller_learns_whether_its_line_was_said_alone(
    lines: sharedlines.SharedLines, clock: Clock
) -> None:
    """The restarts of partitions failing together say their take-up quietly too: `say`
    answers whether the line went out at its own level (alone) or at DEBUG (one of many)."""
    assert lines.say("0", logging.WARNING, "partition %s: refused", "0") is True
    clock.now += 1.0
    assert lines.say("1", logging.WARNING, "partition %s: refused", "1") is False
    assert lines.say("0", logging.WARNING, "partition %s: refused", "0") is False
    clock.now += sharedlines.WINDOW_S + 1.0  # quiet for a window: alone again
    assert lines.say("1", logging.WARNING, "partition %s: refused", "1") is True
