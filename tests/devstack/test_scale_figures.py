"""The operator benchmark's series tables (every ``scale-*`` record as one row, and the runs in
a shared namespace, ``real-shared-*``) and the figures of its report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer_devstack.benchmarks import operatorreports, records


def write(directory: Path, name: str, result: dict[str, object]) -> None:
    body = {
        "benchmark": name,
        "command": f"ehb bench operator --json ({name})",
        "date": "2026-01-01T00:00:00+00:00",
        "load_average": [1.0, 1.0, 1.0],
        "result": result,
    }
    (directory / f"{name}.json").write_text(json.dumps(body))


def test_a_series_marker_renders_one_row_per_record_smallest_fleet_first(tmp_path: Path) -> None:
    write(
        tmp_path,
        "scale-b",
        {"consumers": 100, "partitions": 32, "pods": 10, "join_balanced_s": 0.2},
    )
    write(
        tmp_path,
        "scale-a",
        {"consumers": 1, "partitions": 1024, "pods": 512, "join_balanced_s": 1.5},
    )
    page = records.expand("<!-- figures: scale -->\n", directory=tmp_path)
    rows = [line for line in page.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split(" | ")[:3] for row in rows] == [
        ["| 1", "1,024", "512"],
        ["| 100", "32", "10"],
    ]
    assert "| - |" in rows[0] + " "  # figures a record lacks are shown as missing
    assert page.count("Recorded 2026-01-01") == 2


def test_a_series_without_records_names_what_to_record(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidInput, match="scale-"):
        records.expand("<!-- figures: scale -->", directory=tmp_path)


def test_the_recorded_scale_runs_render() -> None:
    page = records.expand("<!-- figures: scale -->", directory=records.DIRECTORY)
    assert "requests / steady cycle" in page


def report(
    rounds: tuple[operatorreports.Round, ...] = (
        operatorreports.Round(join_s=0.1, leave_s=0.1, deleted_s=0.1),
    ),
    *,
    steady_cpu_s: float = 0.0,
    settings: operatorreports.Settings | None = None,
) -> operatorreports.Report:
    """A report of ``rounds`` with a steady window of 60 cycles in 40 s."""
    return operatorreports.Report(
        settings=settings or operatorreports.Settings(rounds=len(rounds)),
        rounds=rounds,
        steady_writes=0,
        steady_requests=0,
        steady_seconds=40.0,
        steady_cycles=60,
        cycle_cpu_s=0.002,
        rss_mb=100.0,
        peak_rss_mb=180.25,
        relist_peak_rss_mb=210.5,
        first_balance_s=2.91234,
        other_pod_bytes=None,
        pods_list_bytes=4_000,
        relist_lists=2,
        steady_cpu_s=steady_cpu_s,
    )


def test_the_steady_cpu_is_the_operators_cpu_per_second_of_the_steady_window() -> None:
    figures = report(steady_cpu_s=10.0).figures()
    assert figures["steady_cpu_cores"] == 0.25
    # A cycle's share is measured over the rounds, apart from it.
    assert figures["cycle_cpu_ms"] == 2.0


def test_each_round_is_reported_beside_the_medians() -> None:
    """A median of three hides one slow round; the JSON names every round's steps."""
    rounds = (
        operatorreports.Round(join_s=0.1, leave_s=0.05, deleted_s=0.07),
        operatorreports.Round(join_s=12.4321, leave_s=0.06, deleted_s=0.08),
        operatorreports.Round(join_s=0.2, leave_s=0.04, deleted_s=0.09),
    )
    figures = report(rounds).figures()
    assert figures["join_balanced_s"] == 0.2
    assert figures["rounds"] == [
        {"join_s": 0.1, "leave_s": 0.05, "deleted_s": 0.07},
        {"join_s": 12.432, "leave_s": 0.06, "deleted_s": 0.08},
        {"join_s": 0.2, "leave_s": 0.04, "deleted_s": 0.09},
    ]


def test_a_run_without_other_pods_says_so_and_its_operator_watched_every_pod() -> None:
    figures = report().figures()
    assert (figures["other_pods"], figures["other_pod_bytes"]) == (0, None)
    assert figures["pod_selector"] is None
    assert figures["first_balance_s"] == 2.912
    assert (figures["operator_rss_mb"], figures["operator_peak_rss_mb"]) == (100.0, 180.25)
    assert figures["relist_peak_rss_mb"] == 210.5
    assert json.loads(json.dumps(figures))["pod_selector"] is None  # null in the JSON


def test_the_other_pods_and_the_selector_are_reported_as_given() -> None:
    settings = operatorreports.Settings(
        rounds=1, other_pods=5000, pod_selector="app.kubernetes.io/part-of=eventhub-balancer"
    )
    figures = dataclasses.replace(
        report(settings=settings), other_pod_bytes=16_384, pods_list_bytes=80_000_000
    ).figures()
    assert figures["other_pods"] == 5000
    assert figures["pod_selector"] == "app.kubernetes.io/part-of=eventhub-balancer"
    assert (figures["other_pod_bytes"], figures["pods_list_bytes"]) == (16_384, 80_000_000)


def test_the_shared_namespace_series_orders_the_runs_by_their_other_pods(tmp_path: Path) -> None:
    """Without other pods first, and for each count the operator watching every pod before
    the one with a selector (shown as -, none)."""
    selector = "app.kubernetes.io/part-of=eventhub-balancer"
    for name, others, chosen, peak in (
        ("real-shared-5000-selected", 5000, selector, 124.0),
        ("real-shared-0", 0, None, 123.0),
        ("real-shared-5000", 5000, None, 1110.0),
        ("real-shared-0-selected", 0, selector, 122.0),
    ):
        write(
            tmp_path,
            name,
            {"other_pods": others, "pod_selector": chosen, "operator_peak_rss_mb": peak},
        )
    page = records.expand("<!-- figures: real-shared -->", directory=tmp_path)
    rows = [line.split(" | ") for line in page.splitlines() if line.startswith("| ")][2:]
    assert [(row[0], row[1], row[4]) for row in rows] == [
        ("| -", "0", "123"),
        (f"| {selector}", "0", "122"),
        ("| -", "5,000", "1,110"),
        (f"| {selector}", "5,000", "124"),
    ]
