"""The demo's live terminal view, and its plain-text fallback for pipes and CI logs.

On a terminal the whole view is redrawn in place with plain ANSI escapes (home, clear to the
end of the screen), a few times a second: a table of pods with their partitions, lag and
events/s, the hand-offs in flight, and a progress line for the scenario. When stdout is not a
terminal it prints one line per step instead, so logs stay readable. No curses: nothing to
install, and nothing breaks on a dumb terminal.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from eventhub_balancer.balancing import partitionlists
from eventhub_balancer_devstack.scenarios import runs

#: Redraws per second on a terminal: lively, but cheap on a 2-core machine.
FRAMES_PER_S = 4.0
HOME_AND_CLEAR = "\x1b[H\x1b[J"
HIDE_CURSOR = "\x1b[?25l"
SHOW_CURSOR = "\x1b[?25h"
BOLD = "\x1b[1m"
DIM = "\x1b[2m"
GREEN = "\x1b[32m"
YELLOW = "\x1b[33m"
RESET = "\x1b[0m"


def compact(partitions: Sequence[str]) -> str:
    """``0,1,2,3,7,9,10`` as ``0-3,7,9-10`` (`partitionlists`, as ``ehb status`` lists them);
    ``-`` for none."""
    return partitionlists.compact(partitions) or "-"


def _stamp(progress: runs.Progress, *, labelled: bool) -> str:
    """``[ours  3.8 s]`` where two systems share the output (the benchmark), ``[  3.8 s]``
    where there is one (the demo)."""
    if labelled:
        return f"[{progress.label} {progress.elapsed_s:5.1f} s]"
    return f"[{progress.elapsed_s:5.1f} s]"


def progress_line(progress: runs.Progress, *, labelled: bool = True) -> str:
    total = len(progress.steps)
    if progress.phase == "draining":
        where = f"draining the backlog ({progress.step_elapsed_s:.1f} s)"
    elif progress.phase == "done":
        where = "done"
    elif progress.step_index < total:
        step = progress.steps[progress.step_index]
        reason = progress.snapshot.reason if progress.snapshot is not None else ""
        state = (
            f"balancing {progress.step_elapsed_s:.1f} s ({reason})"
            if progress.phase == "balancing"
            else f"balanced in {_last_balanced(progress)}"
        )
        where = f"step {progress.step_index + 1}/{total} {step.name}: {state}"
    else:
        where = progress.phase
    return f"{_stamp(progress, labelled=labelled)} {where}"


def _last_balanced(progress: runs.Progress) -> str:
    if not progress.results:
        return "-"
    return describe(progress.results[-1])


def describe(result: runs.StepResult) -> str:
    """``2.38 s after 11.36 s of pod start-up`` or ``timeout (...)``."""
    if result.balanced_s is None:
        return f"timeout ({result.reason})"
    text = f"{result.balanced_s:.2f} s"
    if result.pods_up_s is not None and result.pods_up_s >= 0.5:
        text += f" after {result.pods_up_s:.2f} s of pod start-up"
    if result.failover_s is not None:
        text += f", failover {result.failover_s:.2f} s"
    return text


def frame(progress: runs.Progress, *, width: int = 100, labelled: bool = True) -> list[str]:
    """The view as lines (no escapes other than colour)."""
    snapshot = progress.snapshot
    in_flight = snapshot.in_flight if snapshot is not None else 0
    partitions = len(snapshot.partitions) if snapshot is not None else 0
    verdict = (
        f"{GREEN}balanced{RESET}"
        if snapshot is not None and snapshot.balanced
        else f"{YELLOW}{snapshot.reason if snapshot else 'starting'}{RESET}"
    )
    lines = [
        f"{BOLD}eventhub-balancer demo{RESET}  {partitions} partitions, "
        f"{len(progress.pods)} pods, {verdict}",
        f"produced {progress.produced}  processed {progress.processed}  "
        f"duplicates {progress.duplicates}  lag {progress.lag}  "
        f"{progress.events_per_s:.0f} events/s  hand-offs in flight {in_flight}",
        "",
        f"{'POD':<16} {'READY':<6} {'RESTARTS':>8} {'#':>3} {'LAG':>6} {'EV/S':>7}  PARTITIONS",
    ]
    room = max(10, width - 52)
    for pod in progress.pods:
        ready = "yes" if pod.ready else f"{YELLOW}no{RESET}"
        pad = " " * (6 - 3 if pod.ready else 6 - 2)
        lines.append(
            f"{pod.name:<16} {ready}{pad} {pod.restarts:>8} {len(pod.partitions):>3} "
            f"{pod.lag:>6} {pod.events_per_s:>7.1f}  {compact(pod.partitions)[:room]}"
        )
    lines.append("")
    for result in progress.results:
        lines.append(
            f"{DIM}done{RESET}  {result.step.name:<28} balanced in {describe(result)}, "
            f"{result.moved} moved"
        )
    lines.append(f"{BOLD}{progress_line(progress, labelled=labelled)}{RESET}")
    return lines


class LiveView:
    """Redraws `frame` in place on a terminal; prints a line per step elsewhere."""

    def __init__(
        self, out: TextIO = sys.stdout, *, tty: bool | None = None, labelled: bool = True
    ) -> None:
        """``labelled``: name the system in each line (off for the demo, which has one)."""
        self.out = out
        self.labelled = labelled
        self.tty = out.isatty() if tty is None else tty
        self._drawn = 0.0
        self._results = 0
        self._phase = ""
        self._label = ""

    def __enter__(self) -> LiveView:
        if self.tty:
            self.out.write(HIDE_CURSOR)
        return self

    def __exit__(self, *_: object) -> None:
        if self.tty:
            self.out.write(SHOW_CURSOR)
            self.out.flush()

    def __call__(self, progress: runs.Progress) -> None:
        if self.tty:
            now = time.monotonic()
            if now - self._drawn < 1.0 / FRAMES_PER_S and progress.phase != "done":
                return
            self._drawn = now
            width = shutil.get_terminal_size((100, 30)).columns
            self.out.write(
                HOME_AND_CLEAR
                + "\n".join(frame(progress, width=width, labelled=self.labelled))
                + "\n"
            )
            self.out.flush()
            return
        # Plain: one line when a step starts balancing, finishes, and when draining.
        if progress.label != self._label:
            self._label, self._results, self._phase = progress.label, 0, ""
        if len(progress.results) > self._results:
            self._results = len(progress.results)
            result = progress.results[-1]
            self._print(
                f"{_stamp(progress, labelled=self.labelled)} {result.step.name}: balanced in "
                f"{describe(result)}, {result.moved} moved; {len(progress.pods)} pods, "
                f"{progress.processed} processed, lag {progress.lag}"
            )
        if progress.phase != self._phase and progress.phase in ("balancing", "draining"):
            self._print(progress_line(progress, labelled=self.labelled))
        self._phase = progress.phase

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()
