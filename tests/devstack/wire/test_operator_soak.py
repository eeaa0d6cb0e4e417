"""``ehb bench soak --operator``: the operator under churn, as a user runs it, at its smallest.

The soak itself takes minutes and its figures are recorded, not asserted (docs/benchmarks.md):
here a few seconds of it show that it churns what it says (pods joined, drained and deleted, a
ConfigMap deleted under a pod, a consumer created and deleted, the operator balancing after
each step), samples the operator's process, and prints one JSON document on stdout; and that
``--tracemalloc`` reports the allocation sites that grew.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: The smallest run: one consumer of 3 partitions over 2 pods, a few seconds of churn.
COMMAND = [
    "bench",
    "soak",
    "--operator",
    "--json",
    "--seconds",
    "3",
    "--partitions",
    "3",
    "--pods",
    "2",
    "--sample-seconds",
    "1",
]
TIMEOUT = 240.0


def soak(*more: str, cwd: Path) -> dict[str, object]:
    ehb = Path(sys.executable).with_name("ehb")
    done = subprocess.run(
        [str(ehb), *COMMAND, *more],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document: dict[str, object] = json.loads(done.stdout)  # the whole of stdout
    return document


def test_the_operator_soak_churns_samples_and_prints_one_document(tmp_path: Path) -> None:
    document = soak(cwd=tmp_path)
    churned = document["churned"]
    assert isinstance(churned, dict)
    assert churned["rounds"] >= 1
    # The first round does everything once: the churn is as the docs say.
    assert churned["joined"] == churned["rounds"]
    assert churned["drained"] >= 1
    assert churned["configmaps_deleted"] >= 1
    assert churned["consumers_created"] == churned["consumers_deleted"] >= 1
    samples = document["samples"]
    assert isinstance(samples, dict)
    # One sample when the sampler starts and one when it stops, whatever the run's length.
    assert len(samples["t_s"]) == len(samples["rss_mb"]) == len(samples["threads"]) >= 2
    assert samples["t_s"] == sorted(samples["t_s"])
    assert min(samples["rss_mb"]) > 0
    assert min(samples["threads"]) > 1  # the operator runs kopf in a thread of its own
    assert (document["mode"], document["traced"], document["growths"]) == ("operator", False, [])
    # A run this short is not judged: its second half holds the start-up, not growth.
    assert document["ok"] is None, document["slopes"]
    assert "judged only on runs of 600 s" in str(document["not_judged"])


def test_tracemalloc_reports_where_the_operator_allocated_more(tmp_path: Path) -> None:
    document = soak("--tracemalloc", cwd=tmp_path)
    assert document["traced"] is True
    growths = document["growths"]
    assert isinstance(growths, list)
    assert growths
    assert all(g["traceback"] and isinstance(g["kb"], float) for g in growths)


def test_a_consumers_options_are_refused_with_operator(tmp_path: Path) -> None:
    ehb = Path(sys.executable).with_name("ehb")
    for more in (["--spark"], ["--rate", "10"]):
        done = subprocess.run(
            [str(ehb), *COMMAND, *more], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode != 0
        assert more[0] in done.stderr
        assert done.stdout == ""


def test_tracemalloc_is_refused_without_operator() -> None:
    ehb = Path(sys.executable).with_name("ehb")
    done = subprocess.run(
        [str(ehb), "bench", "soak", "--json", "--tracemalloc"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "--tracemalloc" in done.stderr
