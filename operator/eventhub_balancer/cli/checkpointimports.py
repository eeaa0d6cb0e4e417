"""``ehb checkpoints import NAME file.json``: put back the positions of an export.

Restores a backup or carries positions over to another hub or consumer group. It moves
checkpoints as a reset does, so it has the same guards: the consumer must be paused, the file
is validated before anything is written (every problem names its place), partitions the hub
does not have are refused, and every blob is written with an epoch above every owner's. It
acts with the identity the EventHubConsumer declares (`actingidentities`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from eventhub_balancer.cli import checkpointchanges, commandlines, consumertargets

if TYPE_CHECKING:
    from eventhub_balancer.contracts import checkpointblobs

COMMAND = ("checkpoints", "import")
HELP = "write the positions of an `ehb checkpoints export` file into a paused EventHubConsumer"

#: The Event's reason on the CR.
REASON = "CheckpointsImported"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    consumertargets.add_arguments(parser)
    parser.add_argument("file", help="a JSON file written by `ehb checkpoints export` (- = stdin)")
    parser.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def read_file(name: str) -> object:
    """The file's JSON; unreadable, not UTF-8 or not JSON is an error naming the file."""
    import sys

    from eventhub_balancer import errors
    from eventhub_balancer.contracts import bounds

    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except OSError as e:
        raise errors.InvalidInput(name, f"cannot be read: {e.strerror}") from None
    except UnicodeDecodeError:
        # PowerShell 5's `>` writes UTF-16: the export is ASCII, so any re-encoding keeps it.
        raise errors.InvalidInput(
            name,
            "is not UTF-8 text, as `ehb checkpoints export` writes: save the export as UTF-8 "
            "(in PowerShell, `ehb checkpoints export NAME | Out-File -Encoding utf8 FILE`), "
            "or convert the file (`iconv -f UTF-16 -t UTF-8`)",
        ) from None
    try:
        return bounds.loads(text)
    except json.JSONDecodeError as e:
        raise errors.InvalidInput(
            name, f"is not JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except ValueError as e:
        # Nested deeper than the decoder goes: no export is, whatever else the file holds.
        raise errors.InvalidInput(
            name, f"is not an export document ({e}): give a file `ehb checkpoints export` wrote"
        ) from None


def run(args: argparse.Namespace) -> int:
    import asyncio

    from eventhub_balancer.adapters import checkpointdocuments

    wanted = checkpointdocuments.parse_import(read_file(args.file), source=args.file)
    return asyncio.run(_import(args, wanted))


async def _import(args: argparse.Namespace, positions: dict[str, checkpointblobs.Position]) -> int:
    from eventhub_balancer import errors
    from eventhub_balancer.adapters import checkpointresets as resets
    from eventhub_balancer.adapters import kubeapi

    namespace = consumertargets.consumer_namespace(args)
    api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
    try:
        consumer = await consumertargets.read_consumer(
            api, args, namespace=namespace, name=args.name
        )
        consumertargets.require_paused(consumer.body)
        spec = consumer.spec
        address = consumertargets.hub_address(consumer)
        try:
            async with resets.hub_client(address) as client:
                known = await resets.partition_ids(client, address)
        finally:
            await consumertargets.close_credential(address)
        unknown = [p for p in positions if p not in known]
        if unknown:
            raise errors.InvalidInput(
                f"{args.file}: checkpoints",
                f"partition(s) {', '.join(unknown)} are not in Event Hub {spec.event_hub_name!r} "
                f"(it has {', '.join(known)}): remove them from the file",
            )
        async with consumertargets.open_store(consumer) as container:
            blobs = resets.store_blobs(
                container,
                fully_qualified_namespace=spec.fully_qualified_namespace,
                eventhub_name=spec.event_hub_name,
                consumer_group=spec.consumer_group,
            )
            changes = await resets.positions_of(
                blobs, positions, status_epochs=consumer.status_epochs
            )
            if not args.dry_run:
                changes = await checkpointchanges.apply_changes(
                    api,
                    consumer,
                    blobs,
                    changes,
                    reason=REASON,
                    what=f"Imported checkpoints from {Path(args.file).name}",
                    # Positions are absolute: the whole import again finishes it.
                    finish=lambda left: commandlines.again(
                        args, ("checkpoints", "import"), names=(args.file,), drop=("dry_run",)
                    ),
                )
    finally:
        api.close()
    checkpointchanges.print_changes(
        changes,
        as_json=args.json,
        dry_run=args.dry_run,
        header=f"{consumer.qualified_name} import {args.file}",
        consumer=consumer.qualified_name,
        change={"file": args.file},
    )
    return 0
