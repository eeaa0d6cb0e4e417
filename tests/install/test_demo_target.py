"""``make demo`` prepares what the demo runs and nothing else: the venv and Azurite. It used to
depend on ``make install``, so a machine without Go or promtool was refused the demo (`the alert
rules' tests need promtool`), and a fresh one built the real control plane first (8 minutes)
for a demo that runs on the local Kubernetes API.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_checks_and_builds_nothing_the_demo_does_not_run() -> None:
    dry = subprocess.run(
        ["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert dry.returncode == 0, dry.stderr
    assert "ehb demo" in dry.stdout
    needless = ("controlplane/build.sh", "tools/build.sh", "promtool", "java -version", "go ")
    assert [word for word in needless if word in dry.stdout] == [], dry.stdout
