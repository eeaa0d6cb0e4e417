"""The ``servers`` figures: each benchmark's local and real-server records side by side."""

from __future__ import annotations

import json
from pathlib import Path

from eventhub_balancer_devstack.benchmarks import records


def record(directory: Path, name: str, result: object, *, command: str = "ehb bench x") -> None:
    body = {
        "benchmark": name,
        "command": command,
        "date": "2026-11-29T05:00:00+00:00",
        "load_average": [1.0, 1.5, 2.0],
        "result": result,
    }
    (directory / f"{name}.json").write_text(json.dumps(body))


def operator(join: float, leave: float, deleted: float) -> dict[str, float]:
    return {
        "join_balanced_s": join,
        "planned_leave_balanced_s": leave,
        "deleted_pod_reassigned_s": deleted,
        "steady_state_requests_per_cycle": 0.0,
    }


def test_rows_pair_local_and_real_records(tmp_path: Path) -> None:
    record(tmp_path, "scale-1024x512", operator(0.489, 0.218, 0.325))
    record(
        tmp_path,
        "real-scale-1024x512",
        operator(0.52, 0.3, 0.4),
        command="ehb bench operator --kube real",
    )
    record(tmp_path, "real-demo", {"lost": 0, "duplicates": 0})
    for seed, reuse in ((1, 0), (2, 0)):
        record(tmp_path, f"real-chaos-seed{seed}", {"epoch_reuse": reuse, "epochs_decreased": 0})
    text = records.render_name("servers", directory=tmp_path)
    lines = text.splitlines()
    assert lines[0] == "| figure | local API | real control plane |"
    assert "| 1,024 x 512: join balanced (s) | 0.489 | 0.52 |" in lines
    assert "| 1,024 x 512: requests per steady cycle | 0 | 0 |" in lines
    # A local record that is missing is said so, not left blank.
    assert "| demo: lost / duplicates | not recorded | 0 / 0 |" in lines
    assert "| chaos: epochs reused / decreased | not recorded | 0 / 0 (2 seeds) |" in lines
    # Rows with no real-server record are left out.
    assert not [line for line in lines if line.startswith("| balance:")]
    # Every record shown is named with when and under what load it was taken.
    assert (
        "- `real-scale-1024x512`: Recorded 2026-11-29 05:00 UTC with "
        "`ehb bench operator --kube real`" in text
    )


def test_a_real_chaos_run_that_reused_an_epoch_shows(tmp_path: Path) -> None:
    record(tmp_path, "real-chaos-seed1", {"epoch_reuse": 0, "epochs_decreased": 0})
    record(tmp_path, "real-chaos-seed2", {"epoch_reuse": 3, "epochs_decreased": 1})
    text = records.render_name("servers", directory=tmp_path)
    assert "| chaos: epochs reused / decreased | not recorded | 3 / 1 (2 seeds) |" in text


def test_the_local_chaos_runs_are_summed_beside_the_real_ones(tmp_path: Path) -> None:
    """The watch faults run only on the local API: its chaos records count as much."""
    record(tmp_path, "real-chaos-seed1", {"epoch_reuse": 0, "epochs_decreased": 0})
    for seed, reuse in ((1, 0), (2, 2), (3, 0)):
        record(tmp_path, f"chaos-seed{seed}", {"epoch_reuse": reuse, "epochs_decreased": 0})
    text = records.render_name("servers", directory=tmp_path)
    assert "| chaos: epochs reused / decreased | 2 / 0 (3 seeds) | 0 / 0 (1 seed) |" in text
    assert "- `chaos-seed1` to `chaos-seed3` (3 runs), the first: Recorded" in text
    assert "- `real-chaos-seed1` to `real-chaos-seed1` (1 run), the first: Recorded" in text


def test_a_real_server_record_reads_as_its_local_counterpart(tmp_path: Path) -> None:
    result = {
        "join_balanced_s": 0.5,
        "planned_leave_balanced_s": 0.2,
        "deleted_pod_reassigned_s": 0.3,
        "steady_state_requests_per_cycle": 0.0,
        "stages": {"join": {"wake_to_decision": {"median_ms": 5.0, "max_ms": 9.0, "count": 3}}},
    }
    for name in ("operator", "real-operator"):
        record(tmp_path, name, result)
    local = records.render_name("operator-stages", directory=tmp_path)
    real = records.render_name("real-operator-stages", directory=tmp_path)
    assert local.split("\n\n")[0] == real.split("\n\n")[0]
    # The whole record too: the operator's view, not the generic one.
    assert (
        records.render_name("real-operator", directory=tmp_path).split("\n\n")[0]
        == (records.render_name("operator", directory=tmp_path).split("\n\n")[0])
    )
