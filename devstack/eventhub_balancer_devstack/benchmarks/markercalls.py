"""What a crash marker costs one handler call, in microseconds on the event loop:
``python -m eventhub_balancer_devstack.benchmarks.markercalls [--calls N] [--rounds R] [--dir D]``.

A partition's worker calls a no-op handler through `crashmarkers.PartitionMarks.call`, once
with the markers in a directory (``--dir``, a fresh one under the system's temporary
directory by default: the file system the markers use in a pod is the emptyDir's) and once
with the markers off; the cost is the difference of the best rounds. It prints one JSON line.
Only `CrashMarkers.partition` and `PartitionMarks.call` are used, so a checkout of another
commit on ``PYTHONPATH`` measures that commit's markers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from eventhub_balancer.consumer import contexts, crashmarkers

#: Calls before the timed ones (the file opened, the caches warm).
WARM_UP = 200


async def _noop(events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext) -> None:
    return None


async def per_call(directory: Path | None, calls: int) -> float:
    """Microseconds per handler call with markers in ``directory`` (None: off)."""
    markers = crashmarkers.CrashMarkers(
        directory, pod="bench-pod-7d9f8c6b5-x2k4q", pod_uid="0f0e2b1c-5a6d-4e3f-9a8b-7c6d5e4f3a2b"
    )
    marks = markers.partition("7", 3, ("bench.servicebus.windows.net", "orders", "$Default"))
    context = contexts.BatchContext(
        partition="7",
        epoch=3,
        consumer="orders",
        pod=markers.pod,
        first_sequence_number=123_456_789,
        last_sequence_number=123_456_793,
        size=5,
    )
    for _ in range(WARM_UP):
        await marks.call(_noop, [], context)
    start = time.perf_counter()
    for _ in range(calls):
        await marks.call(_noop, [], context)
    elapsed = time.perf_counter() - start
    marks.ended()
    return elapsed / calls * 1e6


async def measure(directory: Path, *, calls: int, rounds: int) -> dict[str, float | int]:
    off, on = [], []
    for _ in range(rounds):
        off.append(await per_call(None, calls))
        on.append(await per_call(directory, calls))
    return {
        "calls": calls,
        "rounds": rounds,
        "off_us_per_call": round(min(off), 2),
        "on_us_per_call": round(min(on), 2),
        "marker_us_per_call": round(min(on) - min(off), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="markercalls", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best counts")
    parser.add_argument("--dir", type=Path, help="where the markers go (default: a fresh one)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be 1 or more")
    with tempfile.TemporaryDirectory(prefix="ehb-markercalls-") as fresh:
        directory = args.dir if args.dir is not None else Path(fresh) / "markers"
        report = asyncio.run(measure(directory, calls=args.calls, rounds=args.rounds))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
