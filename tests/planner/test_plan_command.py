"""`ehb plan`: reading scenarios from files and stdin, the table, --json, and bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from eventhub_balancer import cli
from eventhub_balancer.balancing import models, partitionlists
from tests.support import paths

SCENARIOS = paths.SCENARIOS
JOIN = SCENARIOS / "join-starts-handoffs.json"


def run(
    argv: list[str], capsys: pytest.CaptureFixture[str], *, stdin: str | None = None
) -> tuple[int, str, str]:
    if stdin is not None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "stdin", io.StringIO(stdin))
            status = cli.main(argv)
    else:
        status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_a_fresh_start_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["plan", "--partitions", "10", "--pods", "3"], capsys)
    assert status == 0
    assert out == (
        "member  state  weight  target  owns  partitions\n"
        "pod-0   ready  1       4       4     0-3\n"
        "pod-1   ready  1       3       3     4-6\n"
        "pod-2   ready  1       3       3     7-9\n"
        "\n"
        "moves: 10\n"
        "  assign  0-3  - -> pod-0  epoch 1  (new)\n"
        "  assign  4-6  - -> pod-1  epoch 1  (new)\n"
        "  assign  7-9  - -> pod-2  epoch 1  (new)\n"
        "balanced: yes\n"
    )


def test_a_scenario_file_prints_revokes_and_the_revoking_partitions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run(["plan", str(JOIN)], capsys)
    assert status == 0
    assert out == (
        "member  state  weight  target  owns  partitions\n"
        "pod-a   ready  1       3       4     0-2 revoking 3\n"
        "pod-b   ready  1       3       4     4-6 revoking 7\n"
        "pod-c   ready  1       2       0     -\n"
        "\n"
        "moves: 2\n"
        "  revoke  3  pod-a -> pod-c  epoch 2  (rebalance)\n"
        "  revoke  7  pod-b -> pod-c  epoch 1  (rebalance)\n"
        "balanced: no\n"
    )


def test_a_starting_pod_is_shown_and_keeps_its_share_with_the_others(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run(["plan", str(SCENARIOS / "join-with-a-pod-starting.json")], capsys)
    assert status == 0
    assert out == (
        "member  state                weight  target  owns  partitions\n"
        "pod-a   ready                1       3       6     0-3 revoking 4-5\n"
        "pod-b   ready                1       3       6     6-10 revoking 11\n"
        "pod-c   ready                1       3       0     -\n"
        "pod-d   notready (starting)  1       -       0     -\n"
        "\n"
        "moves: 3\n"
        "  revoke  4-5  pod-a -> pod-c  epoch 1  (rebalance)\n"
        "  revoke  11   pod-b -> pod-c  epoch 1  (rebalance)\n"
        "balanced: no\n"
    )


@pytest.mark.parametrize("argv", [["plan", "--json"], ["plan", "--json", "-"]])
def test_stdin_is_read_without_a_file_or_with_a_dash(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(argv, capsys, stdin=JOIN.read_text())
    assert status == 0
    expected = json.loads(JOIN.with_suffix(".expected.json").read_text())
    assert json.loads(out) == expected


def test_json_output_is_the_documented_format(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["plan", "--json", "--partitions", "3", "--pods", "2"], capsys)
    assert status == 0
    assert json.loads(out) == {
        "assignment": {
            "0": {"owner": "pod-0", "epoch": 1, "state": "owned", "since": 0},
            "1": {"owner": "pod-0", "epoch": 1, "state": "owned", "since": 0},
            "2": {"owner": "pod-1", "epoch": 1, "state": "owned", "since": 0},
        },
        "moves": [
            {"partition": "0", "from": None, "to": "pod-0", "epoch": 1, "kind": "assign"},
            {"partition": "1", "from": None, "to": "pod-0", "epoch": 1, "kind": "assign"},
            {"partition": "2", "from": None, "to": "pod-1", "epoch": 1, "kind": "assign"},
        ],
        "balanced": True,
        "targets": {"pod-0": 2, "pod-1": 1},
    }


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ('{"partitions": ["0"],\n "members": [', "scenario: malformed JSON at line 2, column 14"),
        (
            '{"partitions": ["0"], "members": [{"name": "a", "state": "redy"}]}',
            "members[0].state: unknown state 'redy' (expected ready, notready or terminating)",
        ),
        (
            '{"partitions": ["0"], "members": [{"name": "a"}, {"name": "a"}]}',
            "members[1].name: duplicate member name 'a' (also members[0])",
        ),
        (
            '{"partitions": ["0"], "members": [],'
            ' "assignment": {"0": {"owner": "a", "epoch": -2}}}',
            'assignment["0"].epoch: must not be negative, got -2',
        ),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    stdin: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["plan"], capsys, stdin=stdin)
    assert status == 2
    assert out == ""
    assert err.startswith(f"ehb: error: {message}")
    assert err.count("\n") == 1


@pytest.mark.parametrize("stdin", ["", " \n"], ids=["empty", "blank"])
def test_nothing_on_stdin_says_what_to_give_not_malformed_json(
    stdin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ehb plan` run where standard input is not a terminal but empty (an IDE's console, a
    script, `make`) said "malformed JSON at line 1, column 1: Expecting value"."""
    status, out, err = run(["plan"], capsys, stdin=stdin)
    assert (status, out) == (2, "")
    assert err == (
        "ehb: error: scenario: standard input is empty: give a file, pipe a scenario in, or "
        "use --partitions P --pods N\n"
    )


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(["plan", str(tmp_path / "nope.json")], capsys)
    assert status == 2
    assert "scenario: cannot read" in err


def test_partitions_without_pods_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(["plan", "--partitions", "4"], capsys)
    assert status == 2
    assert "--partitions and --pods go together" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--partitions", "1000000", "--pods", "3"], "--partitions: must be from 0 to 100,000"),
        (["--partitions", "8", "--pods", "-1"], "--pods: must be from 0 to 100,000, got -1"),
    ],
)
def test_a_fresh_start_out_of_range_exits_2_at_once(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo with more zeros took 15 s and 637 MB to plan a million partitions."""
    status, _, err = run(["plan", *argv], capsys)
    assert status == 2
    assert said in err


def test_an_assignment_to_a_vanished_partition_is_fine(capsys: pytest.CaptureFixture[str]) -> None:
    body = {
        "partitions": ["0"],
        "members": [{"name": "a"}],
        "assignment": {"5": {"owner": "a", "epoch": 1}},
    }
    status, out, _ = run(["plan", "--json"], capsys, stdin=json.dumps(body))
    assert status == 0
    assert json.loads(out)["moves"] == [
        {"partition": "0", "from": None, "to": "a", "epoch": 1, "kind": "assign"},
        {"partition": "5", "from": "a", "to": None, "epoch": 1, "kind": "revoke"},
    ]


def test_the_command_prints_no_traceback_on_bad_input() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "eventhub_balancer", "plan"],
        input="{oops",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "scenario: malformed JSON at line 1, column 2" in done.stderr


def test_compact_folds_numeric_runs() -> None:
    ids = [models.PartitionId(p) for p in ["8", "0", "1", "x", "2", "3", "10", "11"]]
    assert partitionlists.compact(ids) == "0-3,8,10-11,x"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"partitions": ["0"], "x": 1}', "x: unknown key ("),
        ('{"partitions": ["0"],\n "members": [', "malformed JSON at line 2, column 14"),
    ],
)
def test_a_bad_scenario_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    """The line said ``x: unknown key`` or ``scenario: malformed JSON``, not which file."""
    path = tmp_path / "scenario.json"
    path.write_text(text)
    status, out, err = run(["plan", str(path)], capsys)
    assert (status, out) == (2, "")
    assert err.startswith(f"ehb: error: {path}: {problem}")
    assert err.count("\n") == 1
