"""`ehb local send`'s events, before anything is sent: what they are, where they go, and what
is refused."""

from __future__ import annotations

import io

import pytest

from eventhub_balancer import cli, errors
from eventhub_balancer_devstack.commands import local_send


def test_a_body_is_numbered_from_one_and_lines_are_taken_as_they_are() -> None:
    assert local_send.bodies('{"id": {n}}', 3, []) == ['{"id": 1}', '{"id": 2}', '{"id": 3}']
    assert local_send.bodies("same", None, []) == ["same"]
    assert local_send.bodies(None, None, ["a\n", "\n", "  \n", "b c\r\n", "d"]) == [
        "a",
        "b c",
        "d",
    ]


def test_events_are_spread_in_turn_and_only_partitions_given_one_are_named() -> None:
    assert local_send.spread(["1", "2", "3"], ["0", "1", "2", "3"]) == {
        "0": ["1"],
        "1": ["2"],
        "2": ["3"],
    }
    assert local_send.spread([str(i) for i in range(5)], ["a", "b"]) == {
        "a": ["0", "2", "4"],
        "b": ["1", "3"],
    }


@pytest.mark.parametrize(
    ("count", "said"),
    [("0", "--count: 0 is not between 1 and 1,000,000"), ("-3", "--count: -3 is not between")],
)
def test_a_count_out_of_bounds_is_refused(
    count: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["local", "send", "orders", "--body", "x", "--count", count]) == 2
    assert said in capsys.readouterr().err


def test_a_count_without_a_body_is_refused() -> None:
    with pytest.raises(errors.InvalidInput, match="--count: goes with --body"):
        local_send.bodies(None, 3, ["a"])


def test_empty_stdin_sends_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("\n\n"))
    assert cli.main(["local", "send", "orders", "--port", "1"]) == 2
    assert "stdin: has no line to send: give one event per line" in capsys.readouterr().err


def test_a_terminal_on_stdin_without_a_body_is_told_what_to_give(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without this, the command waited for lines from a terminal, saying nothing."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal())
    assert cli.main(["local", "send", "orders"]) == 2
    assert "--body: give the events: --body TEXT [--count N], or their lines on stdin" in (
        capsys.readouterr().err
    )
