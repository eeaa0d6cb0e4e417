"""``ehb checkpoints list``: the checkpoints of a consumer group as the blobs hold them.

Operators look here first when a partition lags or a hand-off looks stuck: which owner and
epoch hold each partition and how old the last checkpoint is. It reads only, and prints no
credentials.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from eventhub_balancer.adapters.checkpointing import Checkpoint

COMMAND = ("checkpoints", "list")
HELP = "list a consumer group's checkpoints: partition, sequence number, offset, owner, epoch, age"

#: Where the connection string comes from when the flag is absent (flags show up in `ps`).
CONNECTION_STRING_ENV = "EHB_BLOB_CONNECTION_STRING"


class CheckpointRow(TypedDict):
    partition: str
    sequenceNumber: int
    offset: str
    owner: str
    epoch: int
    lastModified: str | None
    ageSeconds: int | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    credentials = parser.add_mutually_exclusive_group()
    credentials.add_argument(
        "--connection-string",
        help=f"storage connection string (default: ${CONNECTION_STRING_ENV})",
    )
    credentials.add_argument(
        "--account-url",
        help="https://<account>.blob.core.windows.net, with DefaultAzureCredential",
    )
    parser.add_argument("--container", required=True, help="the checkpoint container")
    parser.add_argument(
        "--namespace",
        required=True,
        help="fully qualified Event Hubs namespace (x.servicebus.windows.net)",
    )
    parser.add_argument("--hub", required=True, help="the event hub name")
    parser.add_argument("--consumer-group", default="$Default", help="default: $Default")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def format_age(seconds: float | None) -> str:
    """``3s``, ``2m``, ``5h``, ``4d``: coarse, as kubectl prints ages."""
    if seconds is None:
        return "-"
    whole = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def rows(checkpoints: Sequence[Checkpoint], *, now: datetime.datetime) -> list[CheckpointRow]:
    result: list[CheckpointRow] = []
    for c in checkpoints:
        age = (now - c.last_modified).total_seconds() if c.last_modified else None
        result.append(
            CheckpointRow(
                partition=c.partition,
                sequenceNumber=c.sequence_number,
                offset=c.offset,
                owner=c.owner_id,
                epoch=c.epoch,
                lastModified=c.last_modified.isoformat() if c.last_modified else None,
                ageSeconds=None if age is None else max(0, int(age)),
            )
        )
    return result


def table(items: Sequence[CheckpointRow]) -> str:
    header = ("PARTITION", "SEQUENCE", "OFFSET", "OWNER", "EPOCH", "AGE")
    lines = [
        (
            r["partition"],
            str(r["sequenceNumber"]),
            r["offset"] or "-",
            r["owner"] or "-",
            str(r["epoch"]),
            format_age(r["ageSeconds"]),
        )
        for r in items
    ]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *lines]
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from eventhub_balancer import errors

    connection_string = args.connection_string
    if connection_string is None and args.account_url is None:
        connection_string = os.environ.get(CONNECTION_STRING_ENV) or None
        if connection_string is None:
            raise errors.InvalidInput(
                "--connection-string",
                f"give --connection-string, --account-url or ${CONNECTION_STRING_ENV}",
            )
    listed = asyncio.run(
        _list(
            connection_string=connection_string,
            account_url=args.account_url,
            container=args.container,
            namespace=args.namespace,
            hub=args.hub,
            consumer_group=args.consumer_group,
        )
    )
    items = rows(listed, now=datetime.datetime.now(datetime.UTC))
    if args.json:
        print(json.dumps(items, indent=2))
    elif items:
        print(table(items))
    else:
        print("no checkpoints")
    return 0


async def _list(
    *,
    connection_string: str | None,
    account_url: str | None,
    container: str,
    namespace: str,
    hub: str,
    consumer_group: str,
) -> list[Checkpoint]:
    from eventhub_balancer.adapters import blobs, checkpointing

    async with blobs.open_container(
        container_name=container, connection_string=connection_string, account_url=account_url
    ) as client:
        store = checkpointing.CheckpointStore(
            client,
            fully_qualified_namespace=namespace,
            eventhub_name=hub,
            consumer_group=consumer_group,
            owner_id="ehb-checkpoints-list",  # read-only: never used to write
        )
        return await store.list()
