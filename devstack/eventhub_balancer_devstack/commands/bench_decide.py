"""`ehb bench decide`: one decision's cost, cold and warm, as the fleet grows (figures)."""

from __future__ import annotations

import argparse
import json

from eventhub_balancer import errors

COMMAND = ("bench", "decide")
HELP = "measure one decision cold and warm, and the planner inside it, for growing fleets"
DESCRIPTION = (
    "Measure one decision cold (nothing carried) and warm (one pod flipped), and the planner "
    "inside it, for growing fleets."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as a JSON list")
    parser.add_argument(
        "--repeat", type=int, default=30, metavar="N", help="decisions per fleet; medians count"
    )
    parser.add_argument(
        "--partitions", type=int, metavar="P", help="one fleet of P partitions (with --pods)"
    )
    parser.add_argument(
        "--pods", type=int, metavar="N", help="one fleet of N pods (with --partitions)"
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import deciding

    if args.repeat < 1:
        raise errors.InvalidInput("--repeat", "must be at least 1")
    if (args.partitions is None) != (args.pods is None):
        raise errors.InvalidInput("--partitions", "give --partitions and --pods together")
    sizes = deciding.SIZES
    if args.partitions is not None:
        if args.partitions < 1 or args.pods < 1:
            raise errors.InvalidInput("--partitions", "partitions and pods must be at least 1")
        sizes = ((args.partitions, args.pods),)
    figures = deciding.run(repeat=args.repeat, sizes=sizes)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(
        f"{'partitions':>10}  {'pods':>5}  {'cold ms':>8}  {'decide ms':>9}  {'planner ms':>10}  "
        f"{'rest ms':>7}"
    )
    for f in figures:
        print(
            f"{f['partitions']:>10}  {f['pods']:>5}  {f['cold_ms']:>8.3f}  {f['decide_ms']:>9.3f}  "
            f"{f['planner_ms']:>10.3f}  {f['outside_planner_ms']:>7.3f}"
        )
    return 0
