"""``ehb demo`` and ``ehb bench balance``: a flag the run cannot honour is refused before
anything starts, in one line that names it (exit status 2).

The local Event Hubs holds 1 to 1024 partitions a hub and the CRD a cycle of 1 to 3600 s: past
those, the demo started the stack and ended in a stack trace (at once, or at its last step
after a minute of running). ``nan`` passed every comparison the checks made.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from eventhub_balancer import cli
from eventhub_balancer_devstack.benchmarks import balancing
from eventhub_balancer_devstack.scenarios import runs

REFUSED = [
    (["--partitions", "2000", "--grow-to", "2001"], "--grow-to: must be at most 1024"),
    (["--grow-to", "2000"], "--grow-to: must be at most 1024"),
    (["--interval", "100000"], "--interval: must be 1 to 3600"),
    (["--rate", "nan"], "--rate: must be between 1 and 5000"),
]
REFUSED_BY_THE_DEMO = [
    *REFUSED,
    (["--settle", "nan"], "--settle: must be 0 or more seconds"),
    (["--balance-timeout", "inf"], "--balance-timeout: must be a positive number of seconds"),
]


def started(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError("the run started")


@pytest.mark.parametrize(
    ("flags", "message"), REFUSED_BY_THE_DEMO, ids=[" ".join(f) for f, _ in REFUSED_BY_THE_DEMO]
)
def test_the_demo_refuses_what_it_cannot_run(
    flags: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(runs, "local_stack", started)
    assert cli.main(["demo", *flags]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"ehb: error: {message}")


@pytest.mark.parametrize(("flags", "message"), REFUSED, ids=[" ".join(f) for f, _ in REFUSED])
def test_the_side_by_side_bench_refuses_them_too(
    flags: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(balancing, "run", started)
    assert cli.main(["bench", "balance", *flags]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"ehb: error: {message}")


@pytest.mark.parametrize("command", [["demo"], ["bench", "balance", "--quick"]])
def test_the_defaults_start_the_run(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "local_stack", started)
    monkeypatch.setattr(balancing, "run", started)
    with pytest.raises(AssertionError, match="the run started"):
        cli.main(command)


WORK_DIR_COMMANDS = [["demo"], ["bench", "balance", "--quick"], ["bench", "chaos"]]


@pytest.mark.parametrize("command", WORK_DIR_COMMANDS, ids=" ".join)
def test_a_work_dir_that_cannot_be_a_directory_is_named_before_anything_starts(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--work-dir`` on a file (or where no directory can be made) ended in a stack trace
    from mkdir: after the stack had started, for the demo and the chaos run."""
    from eventhub_balancer_devstack import chaos

    monkeypatch.setattr(runs, "local_stack", started)
    monkeypatch.setattr(balancing, "run", started)
    monkeypatch.setattr(chaos, "run", started)
    taken = tmp_path / "notes.txt"
    taken.write_text("not a directory")
    for work_dir in (taken, taken / "run"):
        assert cli.main([*command, "--work-dir", str(work_dir)]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"ehb: error: --work-dir: {work_dir} cannot be made a directory (")
    assert taken.read_text() == "not a directory"
