"""The crash marker timing (`benchmarks.markercalls`): what it prints and what it leaves;
never how fast anything is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventhub_balancer_devstack.benchmarks import markercalls


def test_it_prints_one_json_line_and_leaves_no_marker_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert markercalls.main(["--calls", "5", "--rounds", "2", "--dir", str(tmp_path)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    report = json.loads(line)
    assert set(report) == {
        "calls",
        "rounds",
        "off_us_per_call",
        "on_us_per_call",
        "marker_us_per_call",
    }
    assert (report["calls"], report["rounds"]) == (5, 2)
    assert list(tmp_path.iterdir()) == []  # each round's worker ended: its file removed


def test_a_count_below_one_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        markercalls.main(["--calls", "0"])
    assert (
        capsys.readouterr().err.splitlines()[-1].endswith("--calls and --rounds must be 1 or more")
    )
