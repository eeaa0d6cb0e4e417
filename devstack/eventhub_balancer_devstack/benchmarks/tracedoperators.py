"""The operator in a process of its own that can trace its allocations, for the soak under
churn (`churning`): the first SIGUSR1 starts tracemalloc, each later one dumps a snapshot, and
`growths` says what grew most between two snapshots, by traceback. The operator is built as
``ehb operator`` builds it, with nothing of a benchmark's own in its process."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TypedDict

from eventhub_balancer.adapters import eventhubs, kubeapi
from eventhub_balancer.handlers import registering, running
from eventhub_balancer_devstack.benchmarks import processes

#: With tracemalloc: frames kept per allocation, and the growths reported.
FRAMES = 8
TOP_GROWTHS = 12
#: The file the operator writes once it traces its allocations.
TRACING = "tracing"
#: The longest wait for the operator to dump a snapshot (a traced heap of tens of MB).
SNAPSHOT_SECONDS = 120.0


class Growth(TypedDict):
    """One allocation site's growth between the two snapshots (tracemalloc)."""

    kb: float
    count: int
    #: the traceback, most recent call first, as ``file:line``
    traceback: list[str]


class OperatorChild(processes.Child):
    """The real operator (`serve_operator`) in a process of its own, which can trace its
    allocations: the first SIGUSR1 starts tracing, each
    later one dumps a snapshot. Tracing starts once the operator runs: the Kubernetes client
    imports its API classes lazily, and under tracing that import alone takes minutes."""

    def __init__(self, kubeconfig: Path, namespace: str, *, snapshots: Path | None) -> None:
        self.role = "operator"
        traced = ["--snapshots", str(snapshots)] if snapshots is not None else []
        command = [sys.executable, "-m", __name__, "--kubeconfig", str(kubeconfig)]
        self.process = subprocess.Popen(
            [*command, "--namespace", namespace, *traced],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.snapshots = snapshots
        self.ready = self._line(processes.START_SECONDS)
        self._taken = itertools.count()

    def trace(self) -> None:
        """Start tracing allocations (before the first snapshot)."""
        assert self.snapshots is not None
        self._signal(self.snapshots / TRACING)

    def snapshot(self) -> Path:
        """Ask for a snapshot; its file once written."""
        assert self.snapshots is not None
        path = self.snapshots / f"{next(self._taken)}.snapshot"
        self._signal(path)
        return path

    def _signal(self, written: Path) -> None:
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + SNAPSHOT_SECONDS
        while not written.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise TimeoutError(f"the operator wrote no {written.name} in {SNAPSHOT_SECONDS} s")
            time.sleep(0.2)


def _trace_on_signal(directory: Path) -> None:
    """In the operator's process: the first SIGUSR1 starts tracing (and writes `TRACING`),
    each later one dumps a snapshot as ``N.snapshot``, renamed into place once whole."""
    taken = itertools.count()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(FRAMES)
            (directory / TRACING).touch()
            return
        path = directory / f"{next(taken)}.snapshot"
        partial = path.with_suffix(".partial")
        tracemalloc.take_snapshot().dump(str(partial))
        partial.rename(path)

    signal.signal(signal.SIGUSR1, on_signal)


def growths(early: Path, late: Path, *, top: int = TOP_GROWTHS) -> list[Growth]:
    """What grew most between two snapshots, by traceback (tracemalloc's own frames and the
    import machinery left out)."""
    ignored = (
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
        tracemalloc.Filter(False, "<unknown>"),
    )
    before = tracemalloc.Snapshot.load(str(early)).filter_traces(ignored)
    after = tracemalloc.Snapshot.load(str(late)).filter_traces(ignored)
    found: list[Growth] = []
    for stat in after.compare_to(before, "traceback")[:top]:
        found.append(
            {
                "kb": round(stat.size_diff / 1024, 1),
                "count": stat.count_diff,
                "traceback": [_where(f.filename, f.lineno) for f in reversed(stat.traceback)],
            }
        )
    return found


def _where(filename: str, lineno: int) -> str:
    """A frame's file as from its package (site-packages/, the repository's folders)."""
    for marker in ("site-packages/", "/operator/", "/devstack/", "/lib/python3"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    return f"{filename}:{lineno}"


def main(argv: Sequence[str] | None = None) -> int:
    """The operator's process (`OperatorChild`)."""
    parser = argparse.ArgumentParser(prog=__name__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--snapshots", type=Path, help="trace allocations; dump here on SIGUSR1")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get(processes.LOG_LEVEL_ENV, "WARNING").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s: %(message)s",
    )
    if args.snapshots is not None:
        _trace_on_signal(args.snapshots)
    serve_operator(args.kubeconfig, args.namespace)
    return 0


def serve_operator(kubeconfig: Path, namespace: str) -> None:
    """The operator as ``ehb operator`` builds it (kopf, adapters, handlers), and nothing of
    a benchmark's own in its process: what is sampled is the operator's. It says it is
    ready, and runs until its stdin closes."""
    api = kubeapi.KubeAPI.from_environment(str(kubeconfig))
    runtime = registering.Operator(
        kube=api,
        hubs=eventhubs.EventHubs(),
        connection=api.connection_info,
    )
    options = running.Options(namespaces=(namespace,), metrics_port=None)
    operator = running.OperatorThread(runtime, options).start(timeout=processes.START_SECONDS)
    try:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)
    finally:
        operator.stop(timeout=processes.STOP_SECONDS)
        api.close()


if __name__ == "__main__":
    sys.exit(main())
