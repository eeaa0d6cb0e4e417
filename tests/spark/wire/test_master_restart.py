"""A standalone master restarted under a running pod: its session is replaced, not stuck.

A master that restarts without recovery kills the executors of the applications it finds on
its workers, and does not know those applications: their driver answers every call, and
every job waits for executors for good. A trigger that never ends never fails, so nothing
checked the session: the pod stayed Ready, its partitions stuck. The keeper's watch
(`consumer.sessionkeeping.WATCH_S`) finds a cluster session without executors lost and
replaces it, and letting it go fails the hung job. The scenario runs in a child process
(`_master_restart`): a classic session is one per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventhub_balancer.consumer import sessionkeeping
from tests.support import paths, sparkarchive
from tests.support.fixtures.spark import spark_unavailable

#: Two cluster starts, two sessions and the job's bounded wait, on a loaded 2-core machine.
CHILD_TIMEOUT_S = 420.0


def test_a_restarted_master_has_the_session_replaced_and_the_hung_job_failed(
    tmp_path: Path,
) -> None:
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "result.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.spark.wire._master_restart",
            "--out",
            str(out),
            "--logs",
            str(tmp_path / "cluster"),
        ],
        cwd=paths.REPOSITORY,
        env=sparkarchive.child_environment(os.environ),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["before"] == 10
    assert result["job_ended"], "the job on the old session still waits for executors"
    assert result["job_failed"]
    # Found lost by the watch: its strikes, each a check of at most ALIVE_TIMEOUT_S, with room.
    # The child asks more often than `sessionkeeping.WATCH_S`, and says how often.
    watch = sessionkeeping.WATCH_STRIKES * (result["watch_s"] + sessionkeeping.ALIVE_TIMEOUT_S)
    assert result["job_took"] < watch + sessionkeeping.DISCARD_TIMEOUT_S + 30
    assert result["restarts"] == 1
    assert result["replaced"]
    assert result["after"] == 10
    assert result["ready"]
