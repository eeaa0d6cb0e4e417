"""``ehb bench consumer``: the runtime against the bare SDK, and Spark mode against the runtime."""

from __future__ import annotations

import argparse
import dataclasses
import json

from eventhub_balancer.cli import flagtypes

COMMAND = ("bench", "consumer")
HELP = "measure the consumer runtime against the raw SDK on a local emulator, and Spark mode"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events", type=int, default=20_000, help="backlog to drain (default 20000)"
    )
    parser.add_argument("--partitions", type=int, default=8, help="partitions (default 8)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating rounds; the best counts (default 2)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="events per batch, both sides (default: the runtime's default)",
    )
    parser.add_argument(
        "--max-wait",
        type=flagtypes.number(float, positive=True),
        default=None,
        help="the runtime's max wait (default: the runtime's default); in a backlog only a "
        "partition's last, partial batch waits for it",
    )
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark figures")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import consuming

    figures = consuming.measure(
        partitions_=args.partitions,
        events=args.events,
        rounds=args.rounds,
        batch_size=args.batch_size,
        max_wait=args.max_wait,
        spark=not args.no_spark,
    )
    if args.json:
        print(json.dumps(dataclasses.asdict(figures)))
    else:
        for key, value in dataclasses.asdict(figures).items():
            print(f"{key}: {value}")
    return 0
