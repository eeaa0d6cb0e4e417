"""`ehb bench emulator`: SDK send and receive rates through the Event Hubs emulator."""

from __future__ import annotations

import argparse
import json

from eventhub_balancer import errors

COMMAND = ("bench", "emulator")
HELP = "measure SDK send/receive events per second through the Event Hubs emulator"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=200_000, help="events to send and receive")
    parser.add_argument("--partitions", type=int, default=4, help="partitions (one link each)")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print only {"send_events_per_s": x, "receive_events_per_s": y}',
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer.benchmarks import emulator

    if args.events < 1:
        raise errors.InvalidInput("--events", f"must be at least 1, not {args.events}")
    if not 1 <= args.partitions <= 64:
        raise errors.InvalidInput("--partitions", f"must be 1 to 64, not {args.partitions}")
    figures = emulator.run(events=args.events, partitions=args.partitions)
    result = {
        "send_events_per_s": round(figures.send_events_per_s),
        "receive_events_per_s": round(figures.receive_events_per_s),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{figures.events} events of {emulator.BODY_BYTES} bytes over "
            f"{figures.partitions} partitions (aio SDK, emulator in its own process)"
        )
        print(f"send:    {result['send_events_per_s']:>8} events/s")
        print(f"receive: {result['receive_events_per_s']:>8} events/s")
    return 0
