"""`ehb bench lag`: a deleted pod's partitions behind late watches, with two operator replicas."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from eventhub_balancer.cli import flagtypes

if TYPE_CHECKING:
    from eventhub_balancer_devstack.benchmarks.lagging import Settings

COMMAND = ("bench", "lag")
HELP = "measure how long a deleted pod keeps its partitions behind late watches"
DESCRIPTION = (
    "Run operator replicas on the local stack, make the API server's watches deliver every "
    "event late, delete a pod, and measure how long its partitions stay on it. Exits 1 when a "
    "round is over the 20 s target."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument(
        "--lag",
        type=flagtypes.number(float, positive=True),
        default=65.0,
        help="how late each watch event arrives, s (65)",
    )
    parser.add_argument(
        "--kinds",
        default="pods,configmaps,eventhubconsumers",
        help="the kinds whose watches lag, comma-separated (all three by default)",
    )
    parser.add_argument("--replicas", type=int, default=2, help="operator replicas (2)")
    parser.add_argument("--partitions", type=int, default=32, help="partitions of the hub (32)")
    parser.add_argument("--pods", type=int, default=3, help="consumer pods (3)")
    parser.add_argument("--rounds", type=int, default=3, help="deletions; the median counts (3)")
    parser.add_argument(
        "--interval", type=int, default=2, help="spec.balancing.intervalSeconds (2)"
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="the seed of the pauses before the deletions (1)"
    )


def settings_of(args: argparse.Namespace) -> Settings:
    """The run's settings; `errors.InvalidInput` naming the flag to change."""
    from eventhub_balancer_devstack.benchmarks import lagging

    return lagging.Settings(
        partitions=args.partitions,
        pods=args.pods,
        replicas=args.replicas,
        lag_seconds=args.lag,
        kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
        rounds=args.rounds,
        interval_seconds=args.interval,
        seed=args.seed,
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import lagging

    settings = settings_of(args)
    try:
        report = lagging.run(settings)
    except TimeoutError as e:
        print(f"ehb: error: the operator did not get there: {e}", file=sys.stderr)
        return 1
    figures = report.figures()
    if args.json:
        print(json.dumps(figures))
        return 0 if figures["ok"] else 1
    print(
        f"{settings.partitions} partitions x {settings.pods} pods, {settings.replicas} operator "
        f"replica(s), watches of {', '.join(settings.kinds)} {settings.lag_seconds:g} s late"
    )
    for i, took in enumerate(figures["rounds_s"], 1):
        print(f"  round {i}: the deleted pod's partitions on live pods after {took:.3f} s")
    verdict = "ok" if figures["ok"] else "OVER THE TARGET"
    print(
        f"median {figures['deleted_pod_reassigned_s']:.3f} s, max "
        f"{figures['deleted_pod_reassigned_max_s']:.3f} s (target {lagging.TARGET_S:g} s): "
        f"{verdict}; events delayed by the lag: "
        f"{figures['watch_fault_effects'].get('delayed', 0)}"
    )
    return 0 if figures["ok"] else 1
