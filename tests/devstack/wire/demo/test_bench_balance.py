"""``ehb bench balance --quick``: both systems through the scenario, figures that add up.

About 3 minutes on 2 cores, beyond the share of ``make test`` this part has: it runs when
``EHB_BENCH_TESTS=1`` is set (``EHB_BENCH_TESTS=1 .venv/bin/pytest tests/devstack/wire/demo``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventhub_balancer_devstack.benchmarks import balancing

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("EHB_BENCH_TESTS") != "1", reason="opt-in: set EHB_BENCH_TESTS=1"
    ),
]

RUN_TIMEOUT_S = 420


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_quick_bench_compares_both_systems_step_by_step(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "eventhub_balancer", "bench", "balance", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert [s["step"] for s in report["steps"]][:2] == ["start 2 pods", "scale 2 -> 6"]
    for step in report["steps"]:
        assert set(step["sdk"]) == set(step["ours"]) == set(balancing.Side.__annotations__)
        assert step["ours"]["lost"] == 0
    assert report["ours"]["lost"] == 0
    assert report["ours"]["duplicates"] <= report["sdk"]["duplicates"]
    ours = {s["step"]: s["ours"] for s in report["steps"]}
    for planned in ("scale 2 -> 6", "scale 6 -> 3", "delete a pod"):
        assert ours[planned]["duplicates"] == 0
        assert ours[planned]["balanced_s"] is not None
    assert ours["delete a pod"]["failover_s"] is not None
    assert report["ratio_balanced_s"] is not None
    assert report["targets"]["lost"]["met"]
    assert report["targets"]["duplicates_on_planned_moves"]["met"]
    # The 40x scale-out target belongs to the full run: at this size it is not judged.
    ratio = report["targets"]["scale_out_ratio"]
    assert ratio["met"] is None
    assert ratio["not_judged"] == balancing.RATIO_NOT_JUDGED
