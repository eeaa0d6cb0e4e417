"""``ehb operator --peering``'s default priority: the earlier a replica started, the higher,
so that a replica starting stays a standby beside the one acting.

Live, with random priorities: the active replica deleted, the standby took over at once, and
2.6 s later the replica replacing the deleted one drew a higher priority and took over
again, every consumer handed over (and every watch listed) a second time."""

from __future__ import annotations

import random
import time

from eventhub_balancer.cli import operator_cmd
from tests.cli.test_operator_tenancy_flags import parsed


def test_a_replica_started_later_never_outranks_one_started_before() -> None:
    rng = random.Random(7)
    now = int(time.time() * 1000)
    for gap_ms in (1, 1000, 86_400_000):
        older = operator_cmd.seniority(now, rng)
        younger = operator_cmd.seniority(now + gap_ms, rng)
        assert older > younger > 0


def test_replicas_started_in_the_same_millisecond_rarely_tie() -> None:
    rng = random.Random(11)
    now = int(time.time() * 1000)
    drawn = {operator_cmd.seniority(now, rng) for _ in range(20)}
    assert len(drawn) >= 19  # 1,024 values: kopf pauses every replica of a tie


def test_the_default_is_seniority_and_a_given_priority_stands() -> None:
    class NoReviews:
        """Never asked here: only the options are built."""

    before = operator_cmd.seniority(int(time.time() * 1000) - 1)
    chosen = operator_cmd.serving_options(parsed(), reviews=NoReviews())  # type: ignore[arg-type]
    assert 0 < chosen.priority < before  # started now: below a replica of a moment ago
    given = parsed("--priority", "5")
    assert operator_cmd.serving_options(given, reviews=NoReviews()).priority == 5  # type: ignore[arg-type]
