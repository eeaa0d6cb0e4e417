"""``ehb deadletters list | show``: a blob in the dead-letter folder that a consumer pod did
not write as it is (edited by hand, written by another tool) is an error naming the blob, not
a traceback, and ``list`` still shows every other dead letter.

The consumer and its container are fakes (`pausedconsumers`); the blobs a real pod writes
are read back from Azurite in tests/adapters/wire/test_deadletter_replay.py.
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any, cast

import pytest

from eventhub_balancer import cli, errors
from eventhub_balancer.adapters import deadletterreplays
from eventhub_balancer.cli import commandlines, deadletterreplaying, deadletters
from tests.support import pausedconsumers
from tests.support.pausedconsumers import ehb

#: A dead letter as a pod writes it (its events are not read by list or show's summary).
GOOD: dict[str, Any] = {
    "partition": "0",
    "firstSequenceNumber": 1,
    "lastSequenceNumber": 2,
    "error": "ValueError: bad",
    "attempts": 3,
    "pod": "orders-a",
    "epoch": 4,
    "deadLetteredTime": "2026-01-01T00:00:00+00:00",
    "events": [],
}

MALFORMED = [
    pytest.param({**GOOD, "epoch": None}, "epoch is None, not an integer", id="epoch null"),
    pytest.param(
        {**GOOD, "firstSequenceNumber": "x"},
        "firstSequenceNumber is 'x', not an integer",
        id="sequence number text",
    ),
    pytest.param({**GOOD, "attempts": 1.5}, "attempts is 1.5, not an integer", id="fraction"),
    pytest.param({**GOOD, "lastSequenceNumber": True}, "lastSequenceNumber is True", id="boolean"),
    pytest.param({**GOOD, "events": [5]}, "has an event that is not an object", id="event"),
]


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> pausedconsumers.PausedConsumer:
    return pausedconsumers.install(monkeypatch)


@pytest.mark.parametrize(("body", "problem"), MALFORMED)
def test_show_names_the_blob_and_its_field(
    consumer: pausedconsumers.PausedConsumer,
    capsys: pytest.CaptureFixture[str],
    body: dict[str, Any],
    problem: str,
) -> None:
    consumer.container.add_dead_letter("0/5-6", body)
    status, out, err = ehb(capsys, "deadletters", "show", "orders", "0/5-6", "-n", "shop")
    assert (status, out) == (1, "")
    assert err.startswith(f"ehb: error: dead letter {pausedconsumers.DEAD_LETTER_PREFIX}0/5-6")
    assert problem in err
    assert err.strip().endswith("delete it or move it out of the deadletter folder")


@pytest.mark.parametrize(("body", "problem"), MALFORMED)
def test_list_names_the_bad_blob_and_lists_the_others(
    consumer: pausedconsumers.PausedConsumer,
    capsys: pytest.CaptureFixture[str],
    body: dict[str, Any],
    problem: str,
) -> None:
    consumer.container.add_dead_letter("0/1-2", GOOD)
    consumer.container.add_dead_letter("0/5-6", body)
    consumer.container.add_dead_letter("1/7-7", {**GOOD, "partition": "1"})
    status, out, err = ehb(capsys, "deadletters", "list", "orders", "-n", "shop", "--json")
    assert status == 1
    assert [r["blob"] for r in json.loads(out)] == ["0/1-2", "1/7-7"]
    (line,) = err.splitlines()
    assert line.startswith(f"ehb: error: dead letter {pausedconsumers.DEAD_LETTER_PREFIX}0/5-6")
    assert problem in line


def test_a_listing_of_only_bad_blobs_says_none_is_readable(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str]
) -> None:
    consumer.container.add_dead_letter("0/5-6", {**GOOD, "epoch": None})
    consumer.container.blobs[f"{pausedconsumers.DEAD_LETTER_PREFIX}1/1-1.json"] = b"[" * 100_000
    status, out, err = ehb(capsys, "deadletters", "list", "orders", "-n", "shop")
    assert (status, out) == (1, "no readable dead letters\n")
    assert [line.split(" ")[4] for line in err.splitlines()] == [
        f"{pausedconsumers.DEAD_LETTER_PREFIX}0/5-6.json:",
        f"{pausedconsumers.DEAD_LETTER_PREFIX}1/1-1.json",
    ]


def test_list_prints_the_whole_error_and_times_to_the_second(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table cut the error at 60 characters, before what failed: ``NotAnOrder: partition 3
    sequence number 110: not an order...``. It is the last column, so it is printed whole (the
    first line, bounded as a report's). The times read to the second, and a batch of one
    sequence number says it once; ``--json`` keeps what the pod wrote."""
    error = (
        "NotAnOrder: partition 3 sequence number 110: not an order "
        "(JSONDecodeError: Expecting value: line 1 column 1 (char 0))"
    )
    written = "2026-12-07T02:25:59.791627+00:00"
    consumer.container.add_dead_letter(
        "3/110-110",
        {
            **GOOD,
            "partition": "3",
            "firstSequenceNumber": 110,
            "lastSequenceNumber": 110,
            "error": error,
            "deadLetteredTime": written,
        },
    )
    consumer.container.add_dead_letter("4/7-8", {**GOOD, "partition": "4", "deadLetteredTime": "x"})
    status, out, _ = ehb(capsys, "deadletters", "list", "orders", "-n", "shop")
    assert status == 0
    _, first, second = out.splitlines()
    assert first.endswith("   " + error)
    assert first.split()[:7] == [
        "3/110-110", "3", "110", "0", "2026-12-07T02:25:59Z", "orders-a", "-"
    ]  # fmt: skip
    assert second.split()[2:5] == ["1-2", "0", "x"]  # unreadable: as written
    status, out, _ = ehb(capsys, "deadletters", "list", "orders", "-n", "shop", "--json")
    assert [r["deadLetteredTime"] for r in json.loads(out)] == [written, "x"]


def test_show_prints_what_the_producers_and_the_pods_wrote_as_text() -> None:
    """An event's body is whatever a producer sent, the error whatever the handler raised:
    shown raw, an escape sequence in either moved the admin's cursor, rewrote lines or set the
    clipboard. Each control character is shown as its escape; the lines stay lines."""
    letter = deadletterreplays.DeadLetter(
        name="d/0/1-2.json",
        short_name="0/1-2",
        partition="0",
        first_sequence_number=1,
        last_sequence_number=2,
        events=1,
        error="ValueError: bad\x1b[2K\nsecond line\x1b]52;c;cm0K\x07",
        attempts=3,
        pod="orders-0",
        epoch=1,
        dead_lettered_time="2026-11-30T09:00:00Z",
        replayed_time=None,
        replayed_to=None,
    )
    body = {"events": [{"sequenceNumber": 1, "body": "{\n\x1b[1A\x1b[2K\r\u202e}"}]}
    shown = deadletters.show_text(letter, body)
    assert all(line.isprintable() for line in shown.splitlines()), repr(shown)
    assert "    ValueError: bad\\x1b[2K" in shown
    assert "    second line\\x1b]52;c;cm0K\\x07" in shown
    assert shown.endswith("{\n\\x1b[1A\\x1b[2K\\x0d\\u202e}")


def test_show_counts_one_event_and_one_attempt_in_the_singular() -> None:
    """A dead letter of one event, given up after one attempt, read "1 events" and "after 1
    attempts"."""
    letter = deadletterreplays.DeadLetter(
        name="d/0/7-7.json",
        short_name="0/7-7",
        partition="0",
        first_sequence_number=7,
        last_sequence_number=7,
        events=1,
        error="ValueError: bad",
        attempts=1,
        pod="orders-0",
        epoch=1,
        dead_lettered_time="2026-11-30T09:00:00Z",
        replayed_time=None,
        replayed_to=None,
    )
    lines = deadletters.show_text(letter, {"events": []}).splitlines()
    assert lines[1] == "  partition 0, sequence numbers 7-7, 1 event"
    assert lines[2].endswith("by orders-0 (epoch 1) after 1 attempt")


@pytest.mark.parametrize(
    ("action", "typo", "meant"),
    [
        (["list", "orders"], "--jsn", "--json"),
        (["show", "orders", "0/1-2"], "--namespce", "--namespace"),
        (["replay", "orders", "--to-hub"], "--dry-rn", "--dry-run"),
    ],
)
def test_a_misspelt_flag_is_named_against_the_actions_own_flags(
    capsys: pytest.CaptureFixture[str], action: list[str], typo: str, meant: str
) -> None:
    """As for every other command: the flag meant, and the --help that lists it. It pointed
    at ``ehb deadletters --help``, which lists no flag of list, show or replay."""
    status, out, err = ehb(capsys, "deadletters", *action, typo, "x")
    verb = action[0]
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"ehb deadletters {verb}: error: unrecognized arguments: {typo} x (did you mean "
        f"{meant}?) (see ehb deadletters {verb} --help)"
    ]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (
            "def process(events, context)\n    return None\n",
            "{tmp}/ehb_replay_handler.py, line 1: expected ':': fix the handler module's syntax",
        ),
        (
            "import os\nTOPIC = os.environ['EHB_NO_SUCH_TOPIC']\n"
            "def process(events, context):\n    return None\n",
            "importing 'ehb_replay_handler' raised KeyError: 'EHB_NO_SUCH_TOPIC' "
            "({tmp}/ehb_replay_handler.py, line 2): fix what the module does at import",
        ),
        (
            'def process(df: "DataFrame", context: "TriggerContext"):\n    return None\n',
            "ehb_replay_handler:process is a Spark handler (df: DataFrame, context: "
            "TriggerContext), but it would be called as process(events, context) with a list "
            "of events: replay it with --to-hub instead, and the consumer's pods process the "
            "events again (--through-handler calls a handler in plain mode only)",
        ),
    ],
    ids=["syntax", "import", "spark"],
)
def test_a_handler_that_cannot_be_imported_is_one_line_naming_through_handler(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    source: str,
    problem: str,
) -> None:
    """As ``ehb consume`` says it: a handler with a syntax error or one that fails at import
    was a traceback, and a wrong reference was named as ``--handler``, a flag replay has not."""
    pausedconsumers.install(monkeypatch)
    (tmp_path / "ehb_replay_handler.py").write_text(source)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "ehb_replay_handler", raising=False)
    status, out, err = ehb(
        capsys,
        "deadletters",
        "replay",
        "orders",
        "-n",
        "shop",
        "--all",
        "--through-handler",
        "ehb_replay_handler:process",
        "--handler-path",
        str(tmp_path),
    )
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"ehb: error: --through-handler: {problem.replace('{tmp}', str(tmp_path))}"
    ]


def test_a_reference_that_is_not_module_function_names_through_handler(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pausedconsumers.install(monkeypatch)
    argv = ["replay", "orders", "-n", "shop", "--all", "--through-handler", "nosuch"]
    status, out, err = ehb(capsys, "deadletters", *argv)
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        "ehb: error: --through-handler: 'nosuch' is not module:function (e.g. "
        "mypkg.pipeline:process)"
    ]


def test_blob_names_after_the_flags_are_the_ones_replayed(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse takes a list of positionals right after NAME only: a blob named after a flag
    was refused as an unrecognized argument, and one after NAME and one after a flag was
    refused whole."""
    for name, first in (("0/5-6", 5), ("0/7-8", 7), ("0/9-10", 9)):
        consumer.container.add_dead_letter(
            name, {**GOOD, "firstSequenceNumber": first, "lastSequenceNumber": first + 1}
        )
    argv = ["replay", "orders", "0/5-6", "-n", "shop", "--to-hub", "0/9-10", "--dry-run"]
    status, out, err = ehb(capsys, "deadletters", *argv, "--json")
    assert (status, err) == (0, "")
    assert sorted(row["blob"] for row in json.loads(out)) == ["0/5-6", "0/9-10"]
    status, out, err = ehb(capsys, "deadletters", "replay", "orders", "--to-hub", "0/7-8", "--bad")
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        "ehb deadletters replay: error: unrecognized arguments: 0/7-8 --bad (see ehb "
        "deadletters replay --help)"
    ]


def test_a_replay_stopped_part_way_names_the_command_with_the_flags_it_was_given(
    tmp_path: Any,
) -> None:
    """The line named `ehb deadletters replay orders 0/7-8`: without the handler it is
    refused (--to-hub or --through-handler is required), and without -n and --kubeconfig it
    reads the kubeconfig context's namespace. It is the command given, with the blobs left
    (tests/adapters/wire/test_deadletter_replay_races.py runs it)."""
    given = [
        "orders",
        "0/5-6",
        "0/7-8",
        "-n",
        "shop",
        "--kubeconfig",
        str(tmp_path / "kube config"),
        "--through-handler",
        "flaky:process",
        "--handler-path",
        str(tmp_path),
        "--delete-after",
    ]
    args = cli.build_parser().parse_args(["deadletters", "replay", *given])
    left = [types.SimpleNamespace(short_name="0/7-8")]
    done = [{"blob": "0/5-6", "result": "replayed, deleted"}]
    error = deadletterreplaying.stopped(
        errors.ConfigurationError("the handler failed"), args, done, cast(Any, left)
    )
    assert str(error) == (
        "the handler failed; replayed before it: 0/5-6; not replayed: 0/7-8: replay those: "
        f"`ehb deadletters replay orders -n shop --kubeconfig '{tmp_path}/kube config' "
        f"--through-handler flaky:process --handler-path {tmp_path} --delete-after 0/7-8`"
    )


def test_a_secret_given_as_a_flag_is_not_repeated_in_the_line() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(
        ["deadletters", "replay", "orders", "-n", "shop", "--to-hub", "--connection-string", "S"]
    )
    line = commandlines.again(args, ("deadletters", "replay"), names=["0/7-8"])
    assert line == (
        "`ehb deadletters replay orders -n shop --to-hub 0/7-8` with EHB_BLOB_CONNECTION_STRING "
        "set to the --connection-string given (not printed)"
    )
