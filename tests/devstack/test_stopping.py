"""Ctrl-C and SIGTERM for the development commands (`commands.stopping`): the first signal
interrupts, even a start; the second prints where each thread is; neither cuts a clean-up
short."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time

import pytest

from eventhub_balancer_devstack.commands import stopping


def _signal(signum: signal.Signals) -> None:
    """Deliver ``signum`` to this process; the handler runs on the main thread, at once."""
    os.kill(os.getpid(), signum)


def test_the_first_signal_interrupts_and_later_ones_do_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    cleaned = False
    with stopping.stopping_cleanly("the things"):
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            _signal(signal.SIGINT)
        # The clean-up: two more signals, neither of which interrupts it.
        _signal(signal.SIGTERM)
        _signal(signal.SIGINT)
        cleaned = True
    assert cleaned
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are given back
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "ehb: SIGINT: stopping the things"
    assert lines[1] == (
        "ehb: SIGTERM again: still stopping the things; where each thread is now "
        "(SIGKILL ends it at once):"
    )
    assert lines[-1] == "ehb: still stopping the things"
    # Between them, the stacks: this test's own frame on the main thread.
    dump = "\n".join(lines[2:-1])
    assert 'thread "MainThread":' in dump
    assert "test_the_first_signal_interrupts_and_later_ones_do_not" in dump
    # Where the signal came, not the handler that prints it.
    assert "in on_signal" not in dump
    assert "in print_threads" not in dump


def test_the_stacks_name_every_thread_and_where_it_waits() -> None:
    release = threading.Event()
    waiter = threading.Thread(target=release.wait, args=(30,), name="a waiter", daemon=True)
    waiter.start()
    try:
        out = io.StringIO()
        stopping.print_threads(out)
    finally:
        release.set()
        waiter.join(5)
    text = out.getvalue()
    assert 'thread "a waiter" (daemon):' in text
    waiting = text.split('thread "a waiter" (daemon):', 1)[1]
    assert "in wait" in waiting  # the innermost call: threading.Event.wait
    assert 'thread "MainThread":' in text


def test_outside_the_main_thread_it_sets_no_handler() -> None:
    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []

    def inside() -> None:
        with stopping.stopping_cleanly("x"):
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join(5)
    assert seen == [before]


class _BusyStderr(io.StringIO):
    """A stderr the main thread was writing to when the signal came: a write from the handler
    fails as a reentrant call does."""

    def write(self, text: str) -> int:
        raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")


def test_a_stderr_that_cannot_be_written_does_not_cut_the_clean_up_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stderr", _BusyStderr())
    cleaned = False
    with stopping.stopping_cleanly("the things"):
        with pytest.raises(KeyboardInterrupt):  # the first still interrupts
            _signal(signal.SIGTERM)
        _signal(signal.SIGTERM)  # the stacks cannot be printed: nothing is raised
        _signal(signal.SIGTERM)
        cleaned = True
    assert cleaned


def _reporters() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == stopping.REPORTER]


def test_a_stop_still_under_way_says_where_each_thread_is_without_a_second_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with stopping.stopping_cleanly("the things", report_after_s=0.05):
        with pytest.raises(KeyboardInterrupt):
            _signal(signal.SIGINT)
        # A clean-up that hangs (bounded here): the report comes on its own, whole once its
        # thread is done.
        deadline = time.monotonic() + 10
        while ("after 0.05 s" not in err.getvalue() or _reporters()) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.01)
    lines = err.getvalue().splitlines()
    assert lines[:2] == [
        "ehb: SIGINT: stopping the things",
        "ehb: still stopping the things after 0.05 s; where each thread is now "
        "(SIGKILL ends it at once):",
    ]
    assert '  thread "MainThread":' in lines
    assert "test_a_stop_still_under_way_says_where_each_thread_is_without_a_second_signal" in (
        err.getvalue()
    )
    assert f'thread "{stopping.REPORTER}"' not in err.getvalue()  # not its own stack


def test_a_stop_that_ends_in_time_reports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with stopping.stopping_cleanly("the things", report_after_s=30):
        with pytest.raises(KeyboardInterrupt):
            _signal(signal.SIGINT)
        assert _reporters()
    deadline = time.monotonic() + 10
    while _reporters() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _reporters()
    assert err.getvalue() == "ehb: SIGINT: stopping the things\n"


def test_serving_ends_at_the_first_signal_or_when_a_service_exits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asked = []

    def ended() -> bool:
        asked.append(1)
        if len(asked) == 3:
            _signal(signal.SIGTERM)  # comes while it serves
        return False

    with stopping.stopping_cleanly("the things"):
        assert stopping.serve(poll_s=0.001, ended=ended, what="Azurite") == 0
    with stopping.stopping_cleanly("the things"):
        assert stopping.serve(poll_s=0.001, ended=lambda: True, what="Azurite") == 1
    assert capsys.readouterr().err.splitlines() == [
        "ehb: SIGTERM: stopping the things",
        "ehb: error: Azurite exited unexpectedly",
    ]


def test_a_signal_while_the_server_says_how_to_use_it_is_a_stop_not_a_failed_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`ehb local blob` and `ehb local kube` printed their first line, which a script reads as
    "up", before serving: a Ctrl-C right after it ended in 130, as if the start had failed
    (`tests/cli/test_exit_codes.py` met it in CI)."""

    def announce() -> None:
        print("Endpoint=...", flush=True)
        _signal(signal.SIGINT)  # comes between two lines
        print("second line")

    with stopping.stopping_cleanly("the things"):
        assert stopping.serve(poll_s=0.001, announce=announce) == 0
    assert capsys.readouterr().out.splitlines() == ["Endpoint=..."]
