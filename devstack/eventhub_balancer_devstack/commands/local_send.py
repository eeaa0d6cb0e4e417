"""``ehb local send``: send events to a hub of the local Event Hubs emulator.

The walkthrough's consumer (``ehb local up --consumer shop/orders``) has nothing to process
until something sends to its hub; on a cluster that is the application, here it is this. The
events are the lines of standard input, or ``--body`` repeated ``--count`` times with ``{n}``
replaced by the event's number. Without ``--partition`` they are spread evenly over the hub's
partitions, as the SDK's round robin does; each partition's events go in order.

It sends to the emulator on 127.0.0.1 only (the one `ehb local up` and `ehb local eventhubs`
start), with the emulator's own key: it is not a producer for a namespace in Azure.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eventhub_balancer import errors
from eventhub_balancer.balancing import partitionlists
from eventhub_balancer.cli import flagtypes

if TYPE_CHECKING:
    from azure.eventhub.aio import EventHubProducerClient

COMMAND = ("local", "send")
HELP = "send events (stdin's lines, or --body) to a hub of the local Event Hubs emulator"

#: The most events one command sends: the emulator keeps every event in memory.
MAX_EVENTS = 1_000_000

#: How long the emulator may take to answer one send.
TIMEOUT_S = 30.0

#: Partitions sent to at once: each send opens a link of its own, about half a second.
CONCURRENCY = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("hub", metavar="HUB", help="the Event Hub's name (ehb local up: orders)")
    parser.add_argument(
        "--port",
        type=flagtypes.port(),
        default=5672,
        help="the emulator's AMQP port on 127.0.0.1 (ehb local up --eventhubs-port; default 5672)",
    )
    parser.add_argument(
        "--body",
        default=None,
        help="each event's body, {n} replaced by its number from 1 (default: one event per "
        "line of stdin)",
    )
    parser.add_argument(
        "--count",
        type=int,
        default=None,
        help="how many events of --body to send (default 1)",
    )
    parser.add_argument(
        "--partition",
        default=None,
        help="send every event to this partition (default: spread evenly over all of them)",
    )


def bodies(body: str | None, count: int | None, lines: Sequence[str]) -> list[str]:
    """The events' bodies: ``body`` ``count`` times (``{n}`` numbered from 1), else ``lines``
    without their line ends, blank lines left out."""
    if count is not None and body is None:
        raise errors.InvalidInput("--count", "goes with --body (stdin's lines are counted as read)")
    if count is not None and not 1 <= count <= MAX_EVENTS:
        raise errors.InvalidInput("--count", f"{count} is not between 1 and {MAX_EVENTS:,}")
    if body is not None:
        return [body.replace("{n}", str(n)) for n in range(1, (count or 1) + 1)]
    found = [line.rstrip("\r\n") for line in lines if line.strip()]
    if len(found) > MAX_EVENTS:
        raise errors.InvalidInput("stdin", f"has more than {MAX_EVENTS:,} lines: send in parts")
    return found


def spread(events: Sequence[str], partitions: Sequence[str]) -> dict[str, list[str]]:
    """Event i to partition i mod n, in order: as even as the count allows."""
    out: dict[str, list[str]] = {p: [] for p in partitions}
    for i, event in enumerate(events):
        out[partitions[i % len(partitions)]].append(event)
    return {p: e for p, e in out.items() if e}


def run(args: argparse.Namespace) -> int:
    if args.body is None and sys.stdin.isatty():
        raise errors.InvalidInput(
            "--body", "give the events: --body TEXT [--count N], or their lines on stdin"
        )
    events = bodies(args.body, args.count, [] if args.body is not None else sys.stdin.readlines())
    if not events:
        raise errors.InvalidInput("stdin", "has no line to send: give one event per line")
    where = asyncio.run(_send_all(events, hub=args.hub, port=args.port, partition=args.partition))
    plural = "s" if len(events) != 1 else ""
    print(f"sent {len(events)} event{plural} to hub {args.hub!r}, partitions {where}")
    return 0


async def _send_all(events: Sequence[str], *, hub: str, port: int, partition: str | None) -> str:
    """Send ``events`` (to ``partition``, else spread), `CONCURRENCY` partitions at a time;
    the partitions they went to, as runs."""
    from azure.eventhub.aio import EventHubProducerClient

    from eventhub_balancer_devstack.eventhubs import emulator

    client = EventHubProducerClient.from_connection_string(
        emulator.connection_string("127.0.0.1", port), eventhub_name=hub, retry_total=0
    )
    async with client:
        partitions = await _partitions(client, hub=hub, port=port)
        if partition is not None and partition not in partitions:
            raise errors.InvalidInput(
                "--partition",
                f"hub {hub!r} has no partition {partition!r} (it has "
                f"{partitionlists.compact(partitions)})",
            )
        plan = spread(events, [partition] if partition is not None else partitions)
        turns = asyncio.Semaphore(CONCURRENCY)

        async def send(partition: str, chunk: Sequence[str]) -> None:
            async with turns:
                await _send(client, partition, chunk)

        await asyncio.gather(*(send(p, chunk) for p, chunk in plan.items()))
    return partitionlists.compact(list(plan))


async def _partitions(client: EventHubProducerClient, *, hub: str, port: int) -> list[str]:
    from azure.eventhub.exceptions import EventHubError

    try:
        return list(await client.get_partition_ids())
    except EventHubError as e:
        if "404" in str(e) or "NotFound" in str(e):
            raise errors.InvalidInput(
                "HUB",
                f"the emulator on 127.0.0.1:{port} has no hub {hub!r}: give one it has (ehb "
                "local up prints them)",
            ) from e
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise errors.ConfigurationError(
            f"no Event Hubs emulator answers on 127.0.0.1:{port} ({first}): start one with "
            "ehb local up (or ehb local eventhubs), or give its --port"
        ) from e


async def _send(client: EventHubProducerClient, partition: str, events: Sequence[str]) -> None:
    """``events`` to ``partition`` in order, in as few batches as their size allows."""
    from azure.eventhub import EventData

    batch = await client.create_batch(partition_id=partition)
    for event in events:
        try:
            batch.add(EventData(event))
        except ValueError:  # the batch is full: send it, start the next
            if len(batch) == 0:
                raise errors.InvalidInput(
                    "--body", f"an event of {len(event.encode()):,} bytes is larger than a batch"
                ) from None
            await client.send_batch(batch, timeout=TIMEOUT_S)
            batch = await client.create_batch(partition_id=partition)
            batch.add(EventData(event))
    await client.send_batch(batch, timeout=TIMEOUT_S)
