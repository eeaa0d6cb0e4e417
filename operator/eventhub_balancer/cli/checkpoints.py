"""``ehb checkpoints list``: the checkpoints of a consumer group as the blobs hold them.

Operators look here first when a partition lags or a hand-off looks stuck: which owner and
epoch hold each partition and how old the last checkpoint is. It reads only, and prints no
credentials. ``ehb checkpoints list NAME`` reads where from the EventHubConsumer (in ``-n``, by
default the kubeconfig context's namespace, as kubectl); without a NAME the flags say where,
for a consumer group no EventHubConsumer manages.

With NAME it acts with the identity the EventHubConsumer declares (its Secret, or its
ServiceAccount's), never the runner's own unless ``--use-my-identity`` says so and the host is
bound to the CR's namespace (`actingidentities`).

`list_checkpoints` and the rows are shared with ``ehb checkpoints export``, ``reset`` and
``import``; writing the changes of a reset or an import, the old -> new table and the Event on
the CR are `checkpointchanges`. Reading the EventHubConsumer is `consumertargets`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from eventhub_balancer.cli import (
    actingidentities,
    allowedendpoints,
    checkpointwaits,
    consumertargets,
    flagtypes,
    tables,
)
from eventhub_balancer.contracts import connectionstrings, namespacepatterns

if TYPE_CHECKING:
    from eventhub_balancer.adapters.checkpointing import Checkpoint

COMMAND = ("checkpoints", "list")
HELP = "list a consumer group's checkpoints, with their owners, epochs, ages and backlogs"
DESCRIPTION = (
    "List a consumer group's checkpoints: partition, sequence number, offset, owner, epoch, age, "
    "deaths, and the events waiting after each (read from the Event Hub: with NAME as its "
    "EventHubConsumer says, without NAME with --eventhub-connection-string or --account-url)."
)
#: The group's line in ``ehb --help``.
GROUP_HELP = "list, export, import and reset a consumer group's checkpoints"

#: Where the connection string comes from when the flag is absent (flags show up in `ps`).
CONNECTION_STRING_ENV = connectionstrings.ENV_BLOB_CONNECTION_STRING
#: The consumer group listed without NAME when --consumer-group is not given (Event Hubs').
DEFAULT_CONSUMER_GROUP = "$Default"
#: What says where the checkpoints are without NAME; with NAME the EventHubConsumer says it.
LOCATION_FLAGS = (
    ("--container", "container"),
    ("--eventhub-namespace", "eventhub_namespace"),
    ("--hub", "hub"),
    ("--consumer-group", "consumer_group"),
    ("--connection-string", "connection_string"),
    ("--account-url", "account_url"),
    ("--eventhub-connection-string", "eventhub_connection_string"),
)


class DeathsRow(TypedDict):
    first: int
    attempts: int


class CheckpointRow(TypedDict):
    partition: str
    sequenceNumber: int
    offset: str
    owner: str
    epoch: int
    lastModified: str | None
    ageSeconds: int | None
    #: The batch after the checkpoint killed a process: its first sequence number, attempts.
    deaths: DeathsRow | None
    #: The events the partition holds past the checkpoint (None: not read, or not known).
    waiting: int | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        type=flagtypes.consumer_name,
        help="the EventHubConsumer whose checkpoints to list (default: give the flags below)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        # Checked with NAME only (`_list_consumer`): without it, a host here is the old
        # spelling of --eventhub-namespace, and is said so.
        help="NAME's namespace (default: the kubeconfig context's, as kubectl)",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG)")
    credentials = parser.add_mutually_exclusive_group()
    credentials.add_argument(
        "--connection-string",
        help=f"storage connection string (default: ${CONNECTION_STRING_ENV})",
    )
    credentials.add_argument(
        "--account-url",
        type=flagtypes.account_url,
        help="https://<account>.blob.core.windows.net, with DefaultAzureCredential (without "
        "NAME only)",
    )
    parser.add_argument(
        "--container",
        type=flagtypes.container,
        help="the checkpoint container (required without NAME)",
    )
    parser.add_argument(
        "--eventhub-namespace",
        type=flagtypes.eventhub_namespace,
        help="fully qualified Event Hubs namespace (x.servicebus.windows.net; required without "
        "NAME)",
    )
    parser.add_argument(
        "--hub", type=flagtypes.event_hub, help="the event hub name (required without NAME)"
    )
    parser.add_argument(
        "--consumer-group",
        type=flagtypes.consumer_group,
        default=None,
        help=f"default: {DEFAULT_CONSUMER_GROUP}",
    )
    parser.add_argument(
        "--eventhub-connection-string",
        help="without NAME: the Event Hub's connection string (Listen), to count the events "
        "waiting after each checkpoint (default: "
        f"${checkpointwaits.EVENTHUB_CONNECTION_STRING_ENV}; with --account-url, "
        "DefaultAzureCredential; else no such column)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    actingidentities.add_arguments(parser)
    allowedendpoints.add_arguments(parser)


def format_age(seconds: float | None) -> str:
    """``3s``, ``2m``, ``5h``, ``4d``: coarse, as kubectl prints ages."""
    if seconds is None:
        return "-"
    whole = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def rows(
    checkpoints: Sequence[Checkpoint],
    *,
    now: datetime.datetime,
    waiting: Mapping[str, int] | None = None,
) -> list[CheckpointRow]:
    """One row a checkpoint; ``waiting``: the events after each, where they were read."""
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
                deaths=None
                if c.deaths is None
                else DeathsRow(first=c.deaths.first, attempts=c.deaths.attempts),
                waiting=None if waiting is None else waiting.get(c.partition),
            )
        )
    return result


def table(items: Sequence[CheckpointRow], *, waiting: bool = False) -> str:
    """The rows as a table; ``waiting``: with the column of the events after each checkpoint
    (only where the hub was asked: without NAME no command reads it)."""
    header = ["PARTITION", "SEQUENCE", "OFFSET", "OWNER", "EPOCH", "AGE", "DEATHS"]
    lines = [
        [
            r["partition"],
            str(r["sequenceNumber"]),
            r["offset"] or "-",
            # The pod: its uid (``<pod>/<uid>``, which a pod of the same name after it has
            # not) made the column 80 characters wide; --json keeps the whole id.
            (r["owner"] or "-").split("/", 1)[0],
            str(r["epoch"]),
            format_age(r["ageSeconds"]),
            "-" if (d := r["deaths"]) is None else f"{d['attempts']} from {d['first']}",
            *([count(r["waiting"])] if waiting else []),
        ]
        for r in items
    ]
    if waiting:
        header.append("WAITING")
    return tables.render(header, lines)


def count(value: int | None) -> str:
    """A count of events as a table shows it: ``1,873``, ``-`` when it is not known."""
    return "-" if value is None else f"{value:,}"


def run(args: argparse.Namespace) -> int:
    import asyncio

    waiting: checkpointwaits.Waiting | None
    if args.name is not None:
        listed, waiting = asyncio.run(_list_consumer(args))
    else:
        listed, waiting = asyncio.run(_list_by_flags(args))
    items = rows(
        listed,
        now=datetime.datetime.now(datetime.UTC),
        waiting=None if waiting is None else waiting.counts,
    )
    managed = args.name is not None
    for line in (
        [] if waiting is None else checkpointwaits.warnings(waiting, listed, managed=managed)
    ):
        print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(items, indent=2))
    elif items:
        print(table(items, waiting=waiting is not None))
    else:
        print("no checkpoints")
    return 0


async def _list_consumer(
    args: argparse.Namespace,
) -> tuple[list[Checkpoint], checkpointwaits.Waiting]:
    """NAME's checkpoints: where its spec says, with the credentials its Secret holds; and the
    events waiting after each, as its hub says where it ends."""
    from eventhub_balancer import errors
    from eventhub_balancer.adapters import kubeapi

    for flag, dest in LOCATION_FLAGS:
        if getattr(args, dest) is not None:
            says = (
                "how its Event Hub is read (the identity it declares)"
                if dest == "eventhub_connection_string"
                else "where its checkpoints are"
            )
            raise errors.InvalidInput(
                flag,
                f"EventHubConsumer {args.name} says {says}: drop {flag}, "
                "or drop NAME to list a consumer group by flags",
            )
    if args.namespace:  # not the parser's type: see add_arguments
        namespacepatterns.name(args.namespace, field="--namespace")
    namespace = consumertargets.consumer_namespace(args)
    api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
    try:
        consumer = await consumertargets.read_consumer(
            api,
            args,
            namespace=namespace,
            name=args.name,
            eventhub=False,  # the hub is read only when it can be (`checkpointwaits`)
        )
        listed = await list_checkpoints(consumer, owner_id="ehb-checkpoints-list")
        return listed, await checkpointwaits.read(api, args, consumer, listed)
    finally:
        api.close()


async def _list_by_flags(
    args: argparse.Namespace,
) -> tuple[list[Checkpoint], checkpointwaits.Waiting | None]:
    """The checkpoints where the flags say; the events waiting after each when the runner gave
    a way to read the hub (None: no column)."""
    from eventhub_balancer import errors

    if args.namespace is not None and not any(getattr(args, d) for _, d in LOCATION_FLAGS):
        # `-n` alone: the consumer's NAME was forgotten.
        raise errors.InvalidInput(
            "NAME",
            "give the EventHubConsumer whose checkpoints to list, as in `ehb checkpoints list "
            f"NAME -n {args.namespace}` (`ehb status -n {args.namespace}` lists them)",
        )
    if args.namespace is not None:
        # The old spelling of --eventhub-namespace: without NAME it cannot be Kubernetes'.
        raise errors.InvalidInput(
            "--namespace",
            "is now --eventhub-namespace (the Event Hubs namespace, x.servicebus.windows.net): "
            "-n/--namespace names the Kubernetes namespace of an EventHubConsumer, as in "
            "`ehb checkpoints list NAME -n NAMESPACE`",
        )
    if not args.eventhub_namespace:
        # With nothing given, most likely the consumer's NAME was meant.
        raise errors.InvalidInput(
            "--eventhub-namespace",
            "give the Event Hubs namespace, x.servicebus.windows.net, or an EventHubConsumer "
            "NAME to read it from (ehb checkpoints list NAME -n NAMESPACE)",
        )
    for flag, dest, what in (
        ("--container", "container", "the checkpoint container"),
        ("--hub", "hub", "the event hub's name"),
    ):
        if not getattr(args, dest):
            raise errors.InvalidInput(
                flag, f"give {what}, or an EventHubConsumer NAME to read it from"
            )
    connection_string = args.connection_string
    if connection_string is None and args.account_url is None:
        connection_string = os.environ.get(CONNECTION_STRING_ENV) or None
        if connection_string is None:
            raise errors.InvalidInput(
                "--connection-string",
                f"give --connection-string, --account-url or ${CONNECTION_STRING_ENV}",
            )
    source = "--connection-string" if args.connection_string else CONNECTION_STRING_ENV
    consumertargets.refuse_malformed(
        connection_string, connectionstrings.blob_problem, source=source
    )
    # Before any client: --account-url builds the caller's own DefaultAzureCredential.
    allowedendpoints.policy(args).check_blob(
        account_url=None if connection_string else args.account_url,
        connection_string=connection_string,
        field="--account-url",
    )
    hub = checkpointwaits.by_flags(args)  # checked before any client too
    group = args.consumer_group or DEFAULT_CONSUMER_GROUP
    listed = await _list(
        connection_string=connection_string,
        account_url=args.account_url,
        container=args.container,
        namespace=args.eventhub_namespace,
        hub=args.hub,
        consumer_group=group,
    )
    if hub is None:
        return listed, None
    return listed, await checkpointwaits.read_by_flags(args, hub, listed, consumer_group=group)


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


# -- shared by ``ehb checkpoints list NAME``, ``export``, ``reset`` and ``import``


async def list_checkpoints(
    target: consumertargets.ConsumerTarget, *, owner_id: str
) -> list[Checkpoint]:
    """``target``'s checkpoints as its store holds them (``owner_id`` only names the reader:
    nothing is written)."""
    from eventhub_balancer.adapters import checkpointing

    spec = target.spec
    async with consumertargets.open_store(target) as container:
        store = checkpointing.CheckpointStore(
            container,
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            consumer_group=spec.consumer_group,
            owner_id=owner_id,
        )
        return await store.list()
