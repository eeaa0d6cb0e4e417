"""The benchmark records behind the manual's figures: recording, reading and rendering."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer_devstack.benchmarks import records, recordviews
from eventhub_balancer_devstack.commands import bench_record

PLANNER = [
    {"partitions": 32, "pods": 4, "case": "fresh", "ms": 0.131},
    {"partitions": 32, "pods": 4, "case": "join", "ms": 0.07},
    {"partitions": 1024, "pods": 64, "case": "fresh", "ms": 3.6},
    {"partitions": 1024, "pods": 64, "case": "join", "ms": 0.97},
]


def _side(balanced: float | None, *, failover: float | None = None, dup: int = 0) -> object:
    return {
        "balanced_s": balanced,
        "end_to_end_s": None if balanced is None else balanced + 1,
        "pods_up_s": 1.0,
        "failover_s": failover,
        "moved": 20,
        "duplicates": dup,
        "lost": 0,
    }


BALANCE = {
    "steps": [
        {
            "step": "scale 2 -> 6",
            "kind": "scale-out",
            "sdk": _side(None, dup=117),
            "ours": _side(1.5),
            "ratio": None,
            "ratio_end_to_end": None,
        },
        {
            "step": "delete a pod",
            "kind": "delete",
            "sdk": _side(3.58, failover=3.64),
            "ours": _side(1.17, failover=1.19),
            "ratio": 3.1,
            "ratio_end_to_end": 2.1,
        },
    ],
    "ratio_balanced_s": 3.1,
    "ratio_end_to_end_s": 2.1,
    "targets": {"lost": {"target": "0", "measured": 0, "met": True}},
    "sdk": {"produced": 100, "processed": 100, "lost": 0, "duplicates": 117, "steps": []},
    "ours": {"produced": 100, "processed": 100, "lost": 0, "duplicates": 0, "steps": []},
    "settings": {
        "partitions": 32,
        "grow_to": 40,
        "rate": 300.0,
        "interval_seconds": 5,
        "sdk_timeout_s": 120.0,
        "ours_timeout_s": 60.0,
    },
}


def record(name: str, result: object) -> records.Record:
    return records.Record(
        benchmark=name,
        command=f"ehb bench {name} --json",
        date="2026-01-02T03:04:05+00:00",
        load_average=(1.5, 1.25, 0.75),
        result=result,
    )


def completed(stdout: str, returncode: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(args=[], returncode=returncode, stdout=stdout)


def test_a_record_keeps_the_output_the_date_and_the_load() -> None:
    def runner(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert list(command) == ["ehb", "bench", "checkpoints", "--json"]
        return completed('{"updates_per_s_1_partition": 384.7}\n')

    made = records.run("checkpoints", ["ehb", "bench", "checkpoints", "--json"], runner=runner)
    assert made.command == "ehb bench checkpoints --json"
    assert made.result == {"updates_per_s_1_partition": 384.7}
    assert len(made.load_average) == 3
    assert made.date.endswith("+00:00")


def test_a_failed_run_records_nothing() -> None:
    with pytest.raises(errors.EventHubBalancerError, match="exited with status 1"):
        records.run("x", ["false"], runner=lambda _: completed("{}", returncode=1))


def test_output_with_logs_before_the_json_keeps_the_json(caplog: pytest.LogCaptureFixture) -> None:
    stdout = 'starting\n{"not": "this"} trailing\n[\n {"a": 1}\n]\n'
    assert records.parse_output(stdout, command="c") == [{"a": 1}]
    assert "not pure JSON" in caplog.text


def test_output_without_json_is_refused() -> None:
    with pytest.raises(errors.InvalidInput, match="no JSON document"):
        records.parse_output("only words\n", command="c")


@pytest.mark.parametrize("name", ["", "../up", "Planner", ".hidden", "a/b"])
def test_record_names_are_file_names(name: str) -> None:
    with pytest.raises(errors.InvalidInput):
        records.check_name(name)


def test_write_then_read_gives_the_same_record(tmp_path: Path) -> None:
    original = record("planner", PLANNER)
    path = records.write(original, directory=tmp_path)
    assert path == tmp_path / "planner.json"
    assert set(json.loads(path.read_text())) == {
        "benchmark",
        "command",
        "date",
        "load_average",
        "result",
    }
    assert records.read("planner", directory=tmp_path) == original


def test_a_missing_or_malformed_record_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidInput, match="no record"):
        records.read("planner", directory=tmp_path)
    (tmp_path / "bad.json").write_text('{"benchmark": "bad"}')
    with pytest.raises(errors.InvalidInput, match="expected the keys"):
        records.read("bad", directory=tmp_path)


def test_the_caption_says_when_and_under_what_load_not_who() -> None:
    caption = records.caption(record("planner", PLANNER))
    assert caption == (
        "Recorded 2026-01-02 03:04 UTC with `ehb bench planner --json`, load average "
        "1.50 / 1.25 / 0.75 (1 / 5 / 15 min) at the end of the run."
    )


def test_planner_figures_are_one_row_per_fleet_one_column_per_case() -> None:
    assert recordviews.planner(PLANNER).splitlines() == [
        "| partitions | pods | fresh ms | join ms |",
        "| --- | --- | ---: | ---: |",
        "| 32 | 4 | 0.131 | 0.07 |",
        "| 1,024 | 64 | 3.6 | 0.97 |",
    ]


def test_balance_figures_compare_the_sdk_and_ours_step_by_step() -> None:
    text = recordviews.balance(BALANCE)
    lines = text.splitlines()
    assert lines[2] == (
        "| scale 2 -> 6 | not within 120 s | 1.5 | > 80x | not within 120 s | 2.5 | - / - "
        "| 20 / 20 | 117 / 0 | 0 / 0 |"
    )
    assert lines[3].startswith("| delete a pod | 3.58 | 1.17 | 3.1x | 4.58 | 2.17 | 3.64 / 1.19 |")
    assert "duplicates 117 / 0" in text
    assert "| `lost` | 0 | 0 | met |" in text


def test_a_target_the_run_did_not_judge_reads_not_judged() -> None:
    targets = {
        "scale_out_ratio": {
            "target": ">= 40",
            "measured": 2.5,
            "met": None,
            "not_judged": "judged only at the full run's size",
        },
        "lost": {"target": "0", "measured": 0, "met": False},
    }
    text = recordviews.balance({**BALANCE, "targets": targets})
    assert "| `scale_out_ratio` | >= 40 | 2.5 | not judged |" in text
    assert "| `lost` | 0 | 0 | not met |" in text


def test_the_balance_stages_name_the_partitions_moved_twice() -> None:
    stage = {"median_ms": 40.0, "max_ms": 90.0, "count": 3}
    steps = [
        {
            **BALANCE["steps"][0],  # type: ignore[index]
            "stages": {"wake_to_decision": stage},
            "owner_changes": {"count": 21, "moved_twice": ["27"]},
        },
        {
            **BALANCE["steps"][1],  # type: ignore[index]
            "stages": {"wake_to_decision": stage},
            "owner_changes": {"count": 11, "moved_twice": []},
        },
    ]
    text = recordviews.balance_stages({**BALANCE, "steps": steps})
    assert text.endswith(
        "(a partition moved twice counts twice): scale 2 -> 6: 21 (moved twice: 27); "
        "delete a pod: 11."
    )


def test_other_figures_are_a_figure_value_table() -> None:
    text = recordviews.generic({"send_events_per_s": 77395.2, "clients": 1, "ok": True})
    assert text.splitlines() == [
        "| figure | value |",
        "| --- | ---: |",
        "| `send_events_per_s` | 77,395.2 |",
        "| `clients` | 1 |",
        "| `ok` | yes |",
    ]


def test_a_page_marker_becomes_the_tables(tmp_path: Path) -> None:
    records.write(record("planner", PLANNER), directory=tmp_path)
    page = "Before.\n\n<!-- figures: planner -->\n\nAfter.\n"
    expanded = records.expand(page, directory=tmp_path)
    assert "<!-- figures" not in expanded
    assert "| 1,024 | 64 | 3.6 | 0.97 |" in expanded
    assert expanded.startswith("Before.\n\n| partitions")
    assert expanded.endswith("at the end of the run.\n\n\nAfter.\n")


def test_a_marker_of_a_missing_record_fails() -> None:
    with pytest.raises(errors.InvalidInput, match="no record"):
        records.expand("<!-- figures: nothing -->", directory=Path("/nonexistent"))


def test_the_marker_form_written_in_capitals_is_only_text(tmp_path: Path) -> None:
    assert records.expand("`<!-- figures: NAME -->`", directory=tmp_path) == (
        "`<!-- figures: NAME -->`"
    )


def test_refresh_rewrites_blocks_in_place_and_is_stable(tmp_path: Path) -> None:
    records.write(record("planner", PLANNER), directory=tmp_path)
    stale = "# Title\n<!-- figures: planner -->\nold figures\n<!-- /figures -->\nEnd.\n"
    fresh = records.refresh(stale, directory=tmp_path)
    assert "old figures" not in fresh
    assert fresh.startswith("# Title\n<!-- figures: planner -->\n| partitions")
    assert fresh.endswith("at the end of the run.\n<!-- /figures -->\nEnd.\n")
    assert records.refresh(fresh, directory=tmp_path) == fresh
    # The site renders a block as it renders a marker: the tables, without the markers.
    expanded = records.expand(fresh, directory=tmp_path)
    assert "<!-- " not in expanded
    assert "| 1,024 | 64 | 3.6 | 0.97 |" in expanded


def test_decide_figures_are_one_row_per_fleet_cold_and_split_at_the_planner() -> None:
    result = [
        {
            "partitions": 32,
            "pods": 31,
            "cold_ms": 0.9,
            "decide_ms": 0.5,
            "planner_ms": 0.1,
            "outside_planner_ms": 0.4,
        },
        {
            "partitions": 1024,
            "pods": 64,
            "cold_ms": 12.5,
            "decide_ms": 7.4,
            "planner_ms": 0.9,
            "outside_planner_ms": 6.5,
        },
    ]
    lines = recordviews.decide(result).splitlines()
    assert lines[0] == (
        "| partitions | pods | cold (ms) | decision (ms) | planner (ms) | the rest (ms) |"
    )
    assert len(lines) == 4
    assert lines[3] == "| 1,024 | 64 | 12.5 | 7.4 | 0.9 | 6.5 |"
    assert recordviews.decide({"not": "a list"}) == recordviews.generic({"not": "a list"})


@pytest.mark.parametrize("flag", ["--directory", "--result=out.json", "--refresh"])
def test_a_flag_of_its_own_after_the_name_is_refused_not_run_as_the_benchmark(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Everything after NAME is COMMAND: `planner --directory D -- ehb bench ...` tried to
    run `--directory` ("cannot run --directory: No such file or directory")."""
    status = bench_record.main(["planner", flag, str(tmp_path), "--", "true"])
    assert status == 2
    name = flag.split("=")[0]
    assert capsys.readouterr().err.splitlines() == [
        f"ehb bench record: error: {name}: give ehb bench record's own flags before NAME, as "
        f"in `ehb bench record {name} ... planner -- COMMAND`"
    ]
    assert list(tmp_path.iterdir()) == []
