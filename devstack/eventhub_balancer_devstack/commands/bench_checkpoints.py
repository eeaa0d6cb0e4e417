"""``ehb bench checkpoints``: owner-checked checkpoint updates per second on a local Azurite."""

from __future__ import annotations

import argparse
import dataclasses
import json

COMMAND = ("bench", "checkpoints")
HELP = "measure checkpoint updates per second (1 and 32 partitions) on a private Azurite"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--updates", type=int, default=2000, help="updates per measurement (default 2000)"
    )
    parser.add_argument(
        "--partitions", type=int, default=32, help="partitions of the concurrent run (default 32)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer import errors
    from eventhub_balancer_devstack.benchmarks import checkpoints

    if args.updates < 1:
        raise errors.InvalidInput("--updates", f"{args.updates} is less than 1")
    if args.partitions < 1:
        raise errors.InvalidInput("--partitions", f"{args.partitions} is less than 1")
    figures = checkpoints.run_on_local_azurite(updates=args.updates, partitions=args.partitions)
    if args.json:
        many = f"updates_per_s_{args.partitions}_partitions"
        print(
            json.dumps(
                {
                    "updates_per_s_1_partition": figures.updates_per_s_1_partition,
                    many: figures.updates_per_s_many_partitions,
                }
            )
        )
    else:
        for key, value in dataclasses.asdict(figures).items():
            print(f"{key}: {value}")
    return 0
