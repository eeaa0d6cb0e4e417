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
        "--clients",
        type=int,
        default=1,
        help="SDK client processes sharing the partitions (default 1: this process)",
    )
    parser.add_argument(
        "--prefetch",
        type=int,
        default=None,
        help="receive credit and max_batch_size per link (default 3000)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"send_events_per_s": x, "receive_events_per_s": y, "clients": n, '
        '"partitions": p}',
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import emulator

    if args.events < 1:
        raise errors.InvalidInput("--events", f"must be at least 1, not {args.events}")
    if not 1 <= args.partitions <= 64:
        raise errors.InvalidInput("--partitions", f"must be 1 to 64, not {args.partitions}")
    if not 1 <= args.clients <= args.partitions:
        raise errors.InvalidInput(
            "--clients",
            f"must be 1 to {args.partitions} (each client takes whole partitions), "
            f"not {args.clients}",
        )
    prefetch = emulator.PREFETCH if args.prefetch is None else args.prefetch
    if prefetch < 1:
        raise errors.InvalidInput("--prefetch", f"must be at least 1, not {prefetch}")
    figures = emulator.run(
        events=args.events, partitions=args.partitions, clients=args.clients, prefetch=prefetch
    )
    result = {
        "send_events_per_s": round(figures.send_events_per_s),
        "receive_events_per_s": round(figures.receive_events_per_s),
        "clients": figures.clients,
        "partitions": figures.partitions,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{figures.events} events of {emulator.BODY_BYTES} bytes over "
            f"{figures.partitions} partitions, {figures.clients} SDK client process(es) "
            f"(aio SDK, prefetch {figures.prefetch}, emulator in its own process)"
        )
        print(f"send:    {result['send_events_per_s']:>8} events/s")
        print(f"receive: {result['receive_events_per_s']:>8} events/s")
    return 0
