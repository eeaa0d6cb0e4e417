"""``ehb bench soak``: one consumer under steady traffic for minutes; what it holds, and its
slope, so that growth shows before a pod runs for weeks (``benchmarks.soaking``)."""

from __future__ import annotations

import argparse
import json

COMMAND = ("bench", "soak")
HELP = (
    "run one consumer under steady traffic on the local stack and sample its memory, threads "
    "and descriptors (process tree, JVM included); report the slopes over the second half"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--seconds", type=float, default=600.0, help="seconds of traffic (default 600)"
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="events/s (default 1000)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions (default 4)")
    parser.add_argument(
        "--sample-seconds", type=float, default=5.0, help="seconds between samples (default 5)"
    )
    parser.add_argument(
        "--spark", action="store_true", help="run the consumer in Spark mode (local[2])"
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import soaking

    report = soaking.run(
        soaking.Settings(
            seconds=args.seconds,
            rate=args.rate,
            partitions=args.partitions,
            spark=args.spark,
            sample_seconds=args.sample_seconds,
        )
    )
    if args.json:
        # The figures are the result, met or not (``ok`` says): a recording keeps them either way.
        print(json.dumps(report))
        return 0
    slopes = report["slopes"]
    print(
        f"{report['mode']} consumer, {report['rate']:g} events/s over {report['partitions']} "
        f"partitions for {report['seconds']:g} s"
    )
    print(
        f"resident memory: {report['rss_mb_mid']} MB at half time, "
        f"{report['rss_mb_end']} MB at the end"
    )
    for name, value in slopes.items():
        print(f"  {name}: {value}")
    print(
        f"sent {report['sent']}, processed {report['processed']}, lost {report['lost']}, "
        f"duplicates {report['duplicates']}; target {report['target_rss_mb_per_min']} MB/min: "
        f"{'met' if report['ok'] else 'NOT met'}"
    )
    return 0
