"""Ctrl-C and SIGTERM for the long-running development commands (`ehb demo`, `ehb local ...`).

- The first signal raises KeyboardInterrupt where the command is, also while it starts, and
  says what is stopped. A start used to run to its end first: a Ctrl-C while the control
  plane came up waited for all of it.
- A second one, while the command takes things down, does not cut the clean-up short. It
  prints where each thread is, so that a stop that hangs says where it hangs. A second Ctrl-C
  used to interrupt the clean-up itself: the operator's thread and the kubelet went on, pods
  were restarted against a stopped API, and the process never exited.
- Any later one is answered with one line.
- A stop still under way `STOP_REPORT_S` after the first signal prints where each thread is,
  once, without a second signal: whoever waits on it learns where it hangs.

SIGKILL still ends the command at once. Azurite and the control plane then end with it
(`parentdeaths`); pods of `ehb demo` and the local node may not.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Final, TextIO

SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
#: How long a stop may take before it says where each thread is: far above the longest clean
#: stop (the demo's pods get their grace period, the control plane 10 s a process).
STOP_REPORT_S: Final = 60.0
#: The name of the thread that reports a slow stop.
REPORTER: Final = "ehb-stop-report"


@contextlib.contextmanager
def stopping_cleanly(what: str, *, report_after_s: float = STOP_REPORT_S) -> Iterator[None]:
    """Within: the first SIGINT or SIGTERM raises KeyboardInterrupt, later ones do not.

    ``what`` names what a stop takes down, for the lines printed on stderr. Outside the main
    thread (where no handler can be set) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = 0
    reporter: threading.Timer | None = None

    def report() -> None:
        _say(
            f"ehb: still stopping {what} after {report_after_s:g} s; where each thread is now "
            "(SIGKILL ends it at once):",
            skip=threading.get_ident(),
        )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal received, reporter
        received += 1
        name = signal.Signals(signum).name
        if received == 1:
            _say(f"ehb: {name}: stopping {what}")
            reporter = threading.Timer(report_after_s, report)
            reporter.name, reporter.daemon = REPORTER, True
            reporter.start()
            raise KeyboardInterrupt(name)
        if received == 2:
            _say(
                f"ehb: {name} again: still stopping {what}; where each thread is now "
                "(SIGKILL ends it at once):",
                here=frame,
            )
            return
        _say(f"ehb: still stopping {what}")

    previous = {each: signal.signal(each, on_signal) for each in SIGNALS}
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
        if reporter is not None:
            reporter.cancel()


def serve(
    *,
    poll_s: float,
    ended: Callable[[], bool] = lambda: False,
    what: str = "",
    announce: Callable[[], None] = lambda: None,
) -> int:
    """Within `stopping_cleanly`, once the services are up: 0 at the first signal, or 1 (said on
    stderr) once ``ended()`` says ``what`` exited by itself; ``ended`` is asked every
    ``poll_s``. ``announce`` prints how to use them: a signal while it prints is one after the
    start (exit 0), as its first line tells a script that they are up. Printed before the
    ``try``, a Ctrl-C right after that line ended in 130."""
    try:
        announce()
        while True:
            time.sleep(poll_s)
            if ended():
                print(f"ehb: error: {what} exited unexpectedly", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        return 0


def _say(line: str, *, here: FrameType | None = None, skip: int | None = None) -> None:
    """``line`` on stderr, and with ``here`` or ``skip`` every thread's stack (`print_threads`).
    A handler runs between two steps of the main thread, which may be writing to stderr
    itself: the write then fails (a reentrant call), and that must not end the clean-up the
    signal came into."""
    with contextlib.suppress(RuntimeError, OSError):
        print(line, file=sys.stderr, flush=True)
        if here is not None or skip is not None:
            print_threads(sys.stderr, here=here, skip=skip)


def print_threads(out: TextIO, *, here: FrameType | None = None, skip: int | None = None) -> None:
    """Every thread's name and stack, innermost call last, as a traceback shows them.

    ``here`` stands for the calling thread's stack: a signal handler passes the frame the
    signal interrupted, so that its own calls are not shown as where the thread waits.
    ``skip``: the ident of a thread left out (the reporter's own).
    """
    frames = sys._current_frames()
    if here is not None:
        frames[threading.get_ident()] = here
    if skip is not None:
        frames.pop(skip, None)
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is None:
            continue
        print(f'  thread "{thread.name}"{" (daemon)" if thread.daemon else ""}:', file=out)
        for line in traceback.format_stack(frame):
            print("  " + line.rstrip("\n").replace("\n", "\n  "), file=out)
    out.flush()
