"""Chaos: consumer kills and replacements, operator restarts, Blob Storage faults and dropped
Event Hubs connections, under bounded load for a bounded time (`local.chaos`).

``make test`` runs a short run (20 s of faults) and checks the invariants and that the system
recovers within a generous bound. The strict recovery bound is a benchmark's:
``ehb bench chaos --json --seconds 600 --seed 7``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from eventhub_balancer_devstack import chaos

SECONDS = float(os.environ.get("EHB_CHAOS_SECONDS", "20"))
SEED = int(os.environ.get("EHB_CHAOS_SEED", "1"))
#: Start-up, recovery and the drain on top of the faults themselves.
OVERHEAD_S = 240
#: The test checks the invariants and that the system recovers at all: balanced again within
#: this generous bound once every pod is Ready. How fast it recovers depends on the machine
#: (the suite shares 2 cores), so the strict bound (one cycle plus the hand-off) is the
#: benchmark's: ``ehb bench chaos --json`` reports it as ``ok``.
RECOVERY_BOUND_S = chaos.RECOVERY_TIMEOUT_S


@pytest.mark.timeout(SECONDS + OVERHEAD_S)
def test_invariants_hold_under_faults(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="eventhub_balancer_devstack.chaos")
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
    # The run waits RECOVERY_BOUND_S for balance once the pods are Ready: None means it never
    # came within that bound (how fast it came is the benchmark's question).
    assert report["balanced_after_ready_s"] is not None, f"not balanced in {RECOVERY_BOUND_S} s"
