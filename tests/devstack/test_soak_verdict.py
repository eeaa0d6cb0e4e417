"""``ehb bench soak`` judges its growth targets only on a run long enough for them to mean
something.

A 10 s soak sampled every second judged the memory target on the slope of its last 5 s, the
consumer's start-up (1.5 MB/min: ``NOT met``), and one sampled every 5 s had no slope at all
and read ``NOT met`` too. As ``ehb bench balance --quick`` leaves its scale-out ratio: the
figures are reported, the verdict is ``null`` with a ``not_judged`` reason.
"""

from __future__ import annotations

import pytest

from eventhub_balancer import cli
from eventhub_balancer_devstack import recording
from eventhub_balancer_devstack.benchmarks import churnedworlds, churning, processsamples, soaking


def report(seconds: float, sample_seconds: float, rss_mb_per_s: float) -> soaking.Report:
    """A soak whose every event was processed once, its memory rising at this pace."""
    times = [round(i * sample_seconds, 1) for i in range(int(seconds / sample_seconds) + 1)]
    series: processsamples.Series = {
        "t_s": times,
        "rss_mb": [80.0 + rss_mb_per_s * t for t in times],
        "threads": [4 for _ in times],
        "descriptors": [19 for _ in times],
        "processes": [1 for _ in times],
    }
    tally = recording.Tally()
    tally.counts.update(("0", n) for n in range(10))
    tally.processed = 10
    settings = soaking.Settings(seconds=seconds, sample_seconds=sample_seconds)
    return soaking._report(settings, series, sent=10, tally=tally, produced={"0": 10}, drained=True)


def test_a_short_soak_reports_its_slopes_but_judges_no_growth() -> None:
    for short in (report(10, 1, 0.03), report(10, 5, 0.03)):
        assert short["ok"] is None, short
        assert "not_judged" in short
    assert report(10, 1, 0.03)["slopes"]["rss_mb_per_min"] == 1.8


def test_a_soak_of_the_recorded_length_is_judged() -> None:
    flat = report(soaking.JUDGED_SECONDS, 5, 0.0)
    assert flat["ok"] is True
    assert "not_judged" not in flat
    growing = report(soaking.JUDGED_SECONDS, 5, 0.03)
    assert growing["ok"] is False


def test_the_printed_verdict_of_a_short_soak_says_not_judged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(soaking, "run", lambda settings: report(10, 1, 0.03))
    assert cli.main(["bench", "soak", "--seconds", "10", "--sample-seconds", "1"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.endswith(f"target 0.2 MB/min: not judged ({soaking.NOT_JUDGED})"), last


def operator_report(seconds: float, rss_mb_per_s: float) -> churning.Report:
    """An operator soak whose memory rises at this pace, sampled every 5 s."""
    times = [float(t) for t in range(0, int(seconds) + 1, 5)]
    series: processsamples.Series = {
        "t_s": times,
        "rss_mb": [120.0 + rss_mb_per_s * t for t in times],
        "threads": [6 for _ in times],
        "descriptors": [30 for _ in times],
        "processes": [1 for _ in times],
    }
    churned: churnedworlds.Churned = {
        "rounds": 2,
        "joined": 2,
        "drained": 1,
        "deleted": 1,
        "configmaps_deleted": 1,
        "configmaps_overwritten": 0,
        "consumers_created": 1,
        "consumers_deleted": 1,
    }
    settings = churning.Settings(seconds=seconds)
    return churning._report(settings, series, churned=churned, growths=[])


def test_the_operator_soak_judges_growth_only_at_the_recorded_length() -> None:
    short = operator_report(60, 0.03)
    assert short["ok"] is None, short
    assert short["not_judged"] == soaking.NOT_JUDGED
    assert operator_report(soaking.JUDGED_SECONDS, 0.0)["ok"] is True
    growing = operator_report(soaking.JUDGED_SECONDS, 0.03)
    assert growing["ok"] is False
    assert "not_judged" not in growing


def test_the_printed_verdict_of_a_short_operator_soak_says_not_judged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(churning, "run", lambda settings: operator_report(60, 0.03))
    assert cli.main(["bench", "soak", "--operator", "--seconds", "60"]) == 0
    out = capsys.readouterr().out
    assert f"target 0.2 MB/min: not judged ({soaking.NOT_JUDGED})" in out, out
