"""``ehb bench balance``: the SDK's balancing and ours through the same scenario, side by side."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from eventhub_balancer import errors

COMMAND = ("bench", "balance")
HELP = (
    "Run the demo's scenario with the SDK's EventProcessorClient and with eventhub-balancer "
    "on one local stack; compare time to balance, moves, duplicates and lost events."
)

#: The targets of issue 8 the figures are judged against (printed, not enforced).
TARGET_SCALE_OUT_RATIO = 10.0
TARGET_FAILOVER_S = 2.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="8 -> 10 partitions, 100 events/s, a 2 s cycle: about 2 minutes",
    )
    parser.add_argument("--partitions", type=int, default=None, help="partitions at the start (32)")
    parser.add_argument("--grow-to", type=int, default=None, help="partitions after growth (40)")
    parser.add_argument("--rate", type=float, default=None, help="events per second (300)")
    parser.add_argument(
        "--interval",
        type=int,
        default=None,
        help="our intervalSeconds and the SDK's load_balancing_interval (5)",
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="keep records and pod logs here"
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer.benchmarks import balancing
    from eventhub_balancer.cli import demo
    from eventhub_balancer.local import terminalviews

    base = balancing.QUICK if args.quick else balancing.Settings()
    changes: dict[str, object] = {"work_dir": args.work_dir}
    for flag, field in (
        ("partitions", "partitions"),
        ("grow_to", "grow_to"),
        ("rate", "rate"),
        ("interval", "interval_seconds"),
    ):
        value = getattr(args, flag)
        if value is not None:
            changes[field] = value
    settings = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    if settings.partitions < 6 or settings.grow_to <= settings.partitions:
        raise errors.InvalidInput(
            "--partitions", "needs at least 6 partitions and --grow-to above it"
        )
    if settings.interval_seconds < 1:
        raise errors.InvalidInput("--interval", "must be at least 1")
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        demo._log_to_file(args.work_dir / "bench.log")
    view = terminalviews.LiveView(sys.stderr, tty=False)
    report = balancing.run(settings, observer=view)
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"{'step':<28} {'balanced s (SDK/ours)':>22} {'ratio':>6} "
        f"{'w/o pod start (SDK/ours)':>25} {'ratio':>6}  moved     duplicates"
    )
    for step in report["steps"]:
        sdk, ours = step["sdk"], step["ours"]
        print(
            f"{step['step']:<28} {_s(sdk['balanced_s']):>10} / {_s(ours['balanced_s']):<9} "
            f"{_r(step['ratio']):>6} {_s(sdk['balancing_s']):>12} / {_s(ours['balancing_s']):<10}"
            f" {_r(step['ratio_balancing']):>6}  {sdk['moved']:>3}/{ours['moved']:<3}"
            f"   {sdk['duplicates']:>5}/{ours['duplicates']:<5}"
        )
    print(
        f"SDK/ours, total over the steps both balanced: {_r(report['ratio_balanced_s'])} "
        f"({_r(report['ratio_balancing_s'])} without the pods' start-up)"
    )
    print(f"lost: SDK {report['sdk']['lost']}, ours {report['ours']['lost']}")
    return 0


def _s(value: float | None) -> str:
    return "timeout" if value is None else f"{value:.2f}"


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"
