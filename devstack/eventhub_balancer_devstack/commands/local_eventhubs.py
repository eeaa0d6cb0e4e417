"""`ehb local eventhubs`: run the Event Hubs emulator in the foreground.

The first line printed is the namespace connection string, so that scripts can read it
(``ehb local eventhubs --hub orders=32 | head -1``); the emulator runs until Ctrl-C or
SIGTERM and then stops cleanly, as the other local commands do (`stopping`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from eventhub_balancer import errors
from eventhub_balancer.adapters import listening
from eventhub_balancer.cli import flagtypes
from eventhub_balancer.contracts import specvalues
from eventhub_balancer_devstack.commands import stopping

if TYPE_CHECKING:
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

COMMAND = ("local", "eventhubs")
HELP = "run a local Event Hubs emulator (AMQP 1.0) for the azure-eventhub SDK"
#: The flags that move the emulator, for a refusal to listen.
FLAGS = listening.Flags(host="--host", port="--port")

#: The AMQP port Event Hubs and its official emulator use without TLS.
DEFAULT_PORT = 5672


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hub",
        action="append",
        default=[],
        metavar="NAME=PARTITIONS",
        help="a hub and its partition count, e.g. orders=32 (repeatable)",
    )
    parser.add_argument(
        "--consumer-group",
        action="append",
        default=[],
        type=flagtypes.consumer_group,
        metavar="NAME",
        help="a consumer group every hub has, besides $Default (repeatable)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port",
        type=flagtypes.port(),
        default=DEFAULT_PORT,
        help="port to listen on (0: a free one)",
    )
    parser.add_argument(
        "--retention-events",
        type=int,
        default=None,
        metavar="N",
        help="keep at most N events per partition (default: all)",
    )


def parse_hubs(values: list[str]) -> dict[str, int]:
    """``["orders=32"]`` -> ``{"orders": 32}``; raises InvalidInput naming the flag."""
    result: dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not sep or not name:
            raise errors.InvalidInput(
                "--hub", f"{value!r} is not NAME=PARTITIONS (for example orders=32)"
            )
        # The operator names no other hub (`specvalues`): one it cannot consume is no use here.
        specvalues.event_hub_name(name, "--hub")
        try:
            partitions = int(count)
        except ValueError:
            raise errors.InvalidInput(
                "--hub", f"{value!r}: the partition count {count!r} is not a whole number"
            ) from None
        if not 1 <= partitions <= 1024:
            raise errors.InvalidInput(
                "--hub", f"{value!r}: a hub has 1 to 1024 partitions, not {partitions}"
            )
        if name in result:
            raise errors.InvalidInput("--hub", f"hub {name!r} is given twice")
        result[name] = partitions
    return result


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

    hubs = parse_hubs(args.hub)
    if args.retention_events is not None and args.retention_events < 1:
        raise errors.InvalidInput(
            "--retention-events", f"must keep at least 1 event, not {args.retention_events}"
        )
    emulator = EventHubsEmulator(
        host=args.host,
        port=args.port,
        hubs=hubs,
        consumer_groups=("$Default", *args.consumer_group),
        retention_events=args.retention_events,
    )

    up = False

    async def serve() -> None:
        nonlocal up
        try:
            try:
                await emulator.start()
            except OSError as e:
                raise errors.ConfigurationError(
                    listening.refusal(args.host, args.port, e, flags=FLAGS)
                ) from e
            up = True  # first: a signal right after the first line printed is one to a server
            _print_serving(emulator, args, hubs)
            await asyncio.Event().wait()  # until a signal raises KeyboardInterrupt
        finally:
            await emulator.stop()

    # A signal raises KeyboardInterrupt out of the loop; asyncio.run then cancels `serve`,
    # whose stop runs before it returns. One while it starts ends in exit status 130.
    with stopping.stopping_cleanly("the Event Hubs emulator"):
        try:
            asyncio.run(serve())
        except KeyboardInterrupt:
            if not up:
                raise
    print("stopped", file=sys.stderr)
    return 0


def _print_serving(
    emulator: EventHubsEmulator, args: argparse.Namespace, hubs: dict[str, int]
) -> None:
    """The connection string first (scripts read it), then what the emulator serves."""
    print(emulator.connection_string(), flush=True)
    print(f"Event Hubs emulator listening on {args.host}:{emulator.port}")
    for name, count in hubs.items():
        print(f"  hub {name}: {count} partitions; {emulator.connection_string(name)}")
    groups = ", ".join(("$Default", *args.consumer_group))
    print(f"  consumer groups: {groups}")
    if args.retention_events:
        print(f"  retention: {args.retention_events} events per partition")
    print("Ctrl-C or SIGTERM stops it.", flush=True)
