"""Chaos: consumer kills and replacements, operator restarts, Blob Storage faults and dropped
Event Hubs connections, under bounded load for a bounded time (`local.chaos`).

``make test`` runs a short run (20 s of faults). A long run is by hand:
``EHB_CHAOS_SECONDS=600 EHB_CHAOS_SEED=7 .venv/bin/pytest -m chaos tests/chaos``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from eventhub_balancer.local import chaos

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]

SECONDS = float(os.environ.get("EHB_CHAOS_SECONDS", "20"))
SEED = int(os.environ.get("EHB_CHAOS_SEED", "1"))
#: Start-up, recovery and the drain on top of the faults themselves.
OVERHEAD_S = 240
#: The balance bound is one cycle plus the hand-off after every pod is Ready again. The short
#: run in `make test` shares 2 cores with the suite, where a consumer restarted by the last
#: kill can outlive its grace and cost a takeover plus a rebalance: it allows 3 bounds. A run
#: by hand checks the bound itself with EHB_CHAOS_BALANCE_SLACK=1 (the report's "ok" always
#: does).
BALANCE_SLACK = float(os.environ.get("EHB_CHAOS_BALANCE_SLACK", "3"))


@pytest.mark.timeout(SECONDS + OVERHEAD_S)
def test_invariants_hold_under_faults(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer.local.chaos")
    options = chaos.ChaosOptions(duration_s=SECONDS, seed=SEED, work_dir=tmp_path / "chaos")
    report = chaos.run(options, observer=lambda _: None)
    print(json.dumps(report, indent=1))
    assert sum(report["actions"].values()) >= SECONDS / options.gap_s[1]
    assert report["produced"] > 0
    assert report["lost"] == 0
    assert report["checkpoint_samples"] > SECONDS / chaos.SAMPLE_S / 2
    assert report["checkpoint_regressions"] == []
    assert report["writer_conflicts"] == []
    assert report["ready_after_faults_s"] is not None
    assert report["balanced_after_ready_s"] is not None
    assert report["balanced_after_ready_s"] <= report["balance_bound_s"] * BALANCE_SLACK
