"""``ehb checkpoints reset NAME``: move a paused consumer's checkpoints to replay or skip events.

The standing request of Event Hubs users (replay since an incident, skip a poison backlog),
answered as Kafka's ``kafka-consumer-groups --reset-offsets`` answers it: only while the
consumer is paused, with a dry run, printing old -> new per partition. Every blob is written
with an epoch above every owner's (``adapters.checkpointresets``), so no stale pod undoes it,
and an Event on the CR records who moved what. It acts with the identity the EventHubConsumer
declares (`actingidentities`), never the runner's own by default.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from typing import Any

from eventhub_balancer.cli import checkpointchanges, commandlines, consumertargets

COMMAND = ("checkpoints", "reset")
HELP = "move a paused EventHubConsumer's checkpoints (earliest, latest, a time, a shift)"

#: The Event's reason on the CR (``kubectl describe ehc``).
REASON = "CheckpointsReset"
#: The flags that choose the target, one of them given: the command that finishes a reset
#: names the target as it was resolved instead (`finish_command`).
TARGETS = ("to_earliest", "to_latest", "to_datetime", "by_duration", "shift_by", "to_sequence")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    consumertargets.add_arguments(parser)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="replay all retained events")
    target.add_argument("--to-latest", action="store_true", help="skip every event so far")
    target.add_argument(
        "--to-datetime",
        metavar="T",
        help="resume at the first event at or after T (RFC 3339, not after now)",
    )
    target.add_argument(
        "--by-duration", metavar="D", help="resume at the first event since D ago (15m, 2h, 1d)"
    )
    target.add_argument(
        "--shift-by",
        metavar="N",
        type=int,
        help="move each checkpoint by N sequence numbers (negative: replay N events)",
    )
    target.add_argument(
        "--to-sequence", metavar="N", type=int, help="resume at sequence number N (the next event)"
    )
    parser.add_argument(
        "--partitions", metavar="0,3,...", help="only these partitions (default: all)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def target_of(args: argparse.Namespace, *, now: datetime.datetime) -> Any:
    """The ``checkpointresets.Target`` the flags choose."""
    from eventhub_balancer import errors
    from eventhub_balancer.adapters import checkpointresets as resets

    if args.to_earliest:
        return resets.ToEarliest()
    if args.to_latest:
        return resets.ToLatest()
    if args.to_datetime is not None:
        when = resets.parse_datetime(args.to_datetime)
        if when > now:
            raise errors.InvalidInput(
                "--to-datetime",
                f"{args.to_datetime!r} is after now ({now.isoformat(timespec='seconds')}): a "
                "reset moves only to events already enqueued, and the ones enqueued before it "
                "would still be processed; give a past time, or --to-latest to skip every event "
                "so far",
            )
        return resets.ToDatetime(when=when)
    if args.by_duration is not None:
        return resets.ToDatetime(when=resets.time_before(now, args.by_duration))
    if args.shift_by is not None:
        return resets.ShiftBy(delta=args.shift_by)
    if args.to_sequence is not None:
        if args.to_sequence < 0:
            raise errors.InvalidInput(
                "--to-sequence",
                f"{args.to_sequence} is negative: give the sequence number of the next event to "
                "process (0 or more), or --to-earliest to replay everything the partition retains",
            )
        return resets.ToSequence(sequence_number=args.to_sequence)
    raise errors.InvalidInput("target", "give one of --to-earliest, --to-latest, ...")


def chosen_partitions(text: str | None, known: list[str]) -> list[str]:
    """``--partitions 0,3`` checked against the hub's partitions (all of them without it)."""
    from eventhub_balancer import errors

    if text is None:
        return known
    wanted = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in known]
    if not wanted or unknown:
        raise errors.InvalidInput(
            "--partitions",
            f"{', '.join(unknown) or repr(text)} not among the hub's partitions "
            f"({', '.join(known)}): give a comma-separated list of those",
        )
    return list(dict.fromkeys(wanted))


def finish_command(args: argparse.Namespace, target: Any, partitions: Sequence[str]) -> str:
    """The reset of ``partitions`` alone, with the other flags given: what finishes one that
    stopped part-way (a time target as the instant it was resolved to, so that a
    ``--by-duration`` does not move)."""
    from eventhub_balancer.adapters import checkpointresets as resets

    return commandlines.again(
        args,
        ("checkpoints", "reset"),
        names=(),
        drop=(*TARGETS, "partitions", "dry_run"),
        flags=(*resets.describe(target).split(" ", 1), "--partitions", ",".join(partitions)),
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    now = datetime.datetime.now(datetime.UTC)
    target = target_of(args, now=now)
    return asyncio.run(_reset(args, target))


async def _reset(args: argparse.Namespace, target: Any) -> int:
    from eventhub_balancer.adapters import checkpointresets as resets
    from eventhub_balancer.adapters import kubeapi

    api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
    address = None
    try:
        consumer = await consumertargets.read_consumer(
            api, args, namespace=consumertargets.consumer_namespace(args), name=args.name
        )
        consumertargets.require_paused(consumer.body)
        spec = consumer.spec
        address = consumertargets.hub_address(consumer)
        async with (
            resets.hub_client(address) as client,
            consumertargets.open_store(consumer) as container,
        ):
            partitions = chosen_partitions(
                args.partitions, await resets.partition_ids(client, address)
            )
            blobs = resets.store_blobs(
                container,
                fully_qualified_namespace=spec.fully_qualified_namespace,
                eventhub_name=spec.event_hub_name,
                consumer_group=spec.consumer_group,
            )
            changes = await resets.plan(
                blobs, client, address, target, partitions, status_epochs=consumer.status_epochs
            )
            if not args.dry_run:
                changes = await checkpointchanges.apply_changes(
                    api,
                    consumer,
                    blobs,
                    changes,
                    reason=REASON,
                    what=f"Reset checkpoints ({resets.describe(target)})",
                    finish=lambda left: finish_command(args, target, left),
                )
    finally:
        api.close()
        if address is not None:
            await consumertargets.close_credential(address)
    checkpointchanges.print_changes(
        changes,
        as_json=args.json,
        dry_run=args.dry_run,
        header=f"{consumer.qualified_name} {resets.describe(target)}",
        consumer=consumer.qualified_name,
        change={"target": resets.describe(target)},
    )
    return 0
