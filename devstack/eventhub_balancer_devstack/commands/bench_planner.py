"""`ehb bench planner`: the planner's cost per cycle for growing fleets (prints figures)."""

from __future__ import annotations

import argparse
import json

from eventhub_balancer import errors

COMMAND = ("bench", "planner")
HELP = "measure the median time of one planning cycle for fresh, join and leave cases"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as a JSON list")
    parser.add_argument(
        "--repeat", type=int, default=7, metavar="N", help="plans per case; the median counts"
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import planner

    if args.repeat < 1:
        raise errors.InvalidInput("--repeat", "must be at least 1")
    figures = planner.run(repeat=args.repeat)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{'partitions':>10}  {'pods':>5}  {'case':<5}  {'ms/plan':>9}")
    for f in figures:
        print(f"{f['partitions']:>10}  {f['pods']:>5}  {f['case']:<5}  {f['ms']:>9.3f}")
    return 0
