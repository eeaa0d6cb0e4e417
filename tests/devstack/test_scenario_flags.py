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
from eventhub_balancer_devstack.commands import demo
from eventhub_balancer_devstack.scenarios import runs

REFUSED = [
    (["--partitions", "2000", "--grow-to", "2001"], "--partitions: must be below 1024"),
    (["--partitions", "1024"], "--partitions: must be below 1024"),
    (["--partitions", "100", "--grow-to", "50"], "--grow-to: must be more than --partitions (100)"),
    (["--grow-to", "2000"], "--grow-to: must be at most 1024"),
    (["--interval", "100000"], "--interval: must be 1 to 3600"),
    (["--rate", "6000"], "--rate: must be between 1 and 5000"),
    (["--rate", "nan"], "argument --rate: 'nan' is not a finite number"),
]
REFUSED_BY_THE_DEMO = [
    *REFUSED,
    (["--settle", "nan"], "argument --settle: 'nan' is not a finite number"),
    (["--settle", "-1"], "argument --settle: '-1' is negative"),
    (["--balance-timeout", "inf"], "argument --balance-timeout: 'inf' is not a finite number"),
    (["--balance-timeout", "0"], "argument --balance-timeout: '0' is not positive"),
]


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit status and the one line said, whether the parser or the run refused."""
    try:
        status = cli.main(argv)
    except SystemExit as e:  # argparse's own errors exit from the parser
        status = int(e.code or 0)
    (line,) = capsys.readouterr().err.splitlines()
    return status, line


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
    status, line = refusal(["demo", *flags], capsys)
    assert status == 2
    assert line.startswith(("ehb: error: ", "ehb demo: error: "))
    assert f"error: {message}" in line


@pytest.mark.parametrize(("flags", "message"), REFUSED, ids=[" ".join(f) for f, _ in REFUSED])
def test_the_side_by_side_bench_refuses_them_too(
    flags: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(balancing, "run", started)
    status, line = refusal(["bench", "balance", *flags], capsys)
    assert status == 2
    assert f"error: {message}" in line


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


@pytest.mark.parametrize("command", [["demo"], ["bench", "balance"]], ids=" ".join)
def test_more_partitions_alone_grow_by_a_quarter(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--partitions 100`` alone was refused: the fixed default ``--grow-to`` of 40 was not
    more, and the line named ``--grow-to``, which its user had not given."""
    seen: list[tuple[int, int]] = []

    def demo_stack(*args: object, hubs: dict[str, int], **kwargs: object) -> NoReturn:
        seen.append((hubs["orders"], -1))
        raise AssertionError("the run started")

    def bench(settings: balancing.Settings, **kwargs: object) -> NoReturn:
        seen.append((settings.partitions, settings.grow_to))
        raise AssertionError("the run started")

    monkeypatch.setattr(runs, "local_stack", demo_stack)
    monkeypatch.setattr(balancing, "run", bench)
    parsed = cli.build_parser().parse_args([*command, "--partitions", "100"])
    if command == ["demo"]:
        demo.check_flags(parsed)
        assert parsed.grow_to == 125
    with pytest.raises(AssertionError, match="the run started"):
        cli.main([*command, "--partitions", "100"])
    assert seen[0][0] == 100
    if command != ["demo"]:
        assert seen == [(100, 125)]


@pytest.mark.parametrize("flag", ["--state-dir", "--blob-location"])
def test_the_local_stack_names_a_directory_it_cannot_make_not_the_ports(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ehb local up --state-dir FILE`` started the services, then ended in `cannot start
    the local stack: [Errno 17] File exists (a port may be taken: ...)`."""
    from eventhub_balancer_devstack import stacks

    monkeypatch.setattr(stacks.LocalStack, "start", started)
    taken = tmp_path / "notes.txt"
    taken.write_text("not a directory")
    free = ["--eventhubs-port", "0", "--blob-port", "0", "--kube-port", "0"]
    assert cli.main(["local", "up", *free, flag, str(taken)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"ehb: error: {flag}: {taken} cannot be made a directory (it is a file): give a "
        "directory, or a path where one can be made"
    ]
    assert cli.main(["local", "up", *free, flag, str(taken / "below")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{taken}/below cannot be made a directory (not a directory)" in line
