"""``ehb checkpoints list``: the checkpoints of a consumer group as the blobs hold them.

Operators look here first when a partition lags or a hand-off looks stuck: which owner and
epoch hold each partition and how old the last checkpoint is. It reads only, and prints no
credentials. ``ehb checkpoints list NAME`` reads where from the EventHubConsumer (in ``-n``, by
default the kubeconfig context's namespace, as kubectl); without a NAME the flags say where,
for a consumer group no EventHubConsumer manages.

The rest of this module is shared by ``ehb checkpoints reset``, ``export`` and ``import``
(``cli.checkpointresets``, ``cli.checkpointexports``, ``cli.checkpointimports``; the command
tree takes one command a module): reading the EventHubConsumer and its Secrets, the refusal
unless it is paused, the old -> new table, and the Event on the CR.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

from eventhub_balancer.cli import allowedendpoints, tables
from eventhub_balancer.contracts import connectionstrings, specs

if TYPE_CHECKING:
    from eventhub_balancer.adapters import checkpointresets
    from eventhub_balancer.adapters.checkpointing import Checkpoint
    from eventhub_balancer.contracts import endpoints

COMMAND = ("checkpoints", "list")
HELP = "list a consumer group's checkpoints: partition, sequence number, offset, owner, epoch, age"

#: Where the connection string comes from when the flag is absent (flags show up in `ps`).
CONNECTION_STRING_ENV = "EHB_BLOB_CONNECTION_STRING"
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
)


class CheckpointRow(TypedDict):
    partition: str
    sequenceNumber: int
    offset: str
    owner: str
    epoch: int
    lastModified: str | None
    ageSeconds: int | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="the EventHubConsumer whose checkpoints to list (default: give the flags below)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
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
        help="https://<account>.blob.core.windows.net, with DefaultAzureCredential",
    )
    parser.add_argument("--container", help="the checkpoint container (required without NAME)")
    parser.add_argument(
        "--eventhub-namespace",
        help="fully qualified Event Hubs namespace (x.servicebus.windows.net; required without "
        "NAME)",
    )
    parser.add_argument("--hub", help="the event hub name (required without NAME)")
    parser.add_argument("--consumer-group", default=None, help=f"default: {DEFAULT_CONSUMER_GROUP}")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
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
    return tables.render(header, lines)


def run(args: argparse.Namespace) -> int:
    import asyncio

    if args.name is not None:
        listed = asyncio.run(_list_consumer(args))
    else:
        listed = asyncio.run(_list_by_flags(args))
    items = rows(listed, now=datetime.datetime.now(datetime.UTC))
    if args.json:
        print(json.dumps(items, indent=2))
    elif items:
        print(table(items))
    else:
        print("no checkpoints")
    return 0


async def _list_consumer(args: argparse.Namespace) -> list[Checkpoint]:
    """NAME's checkpoints: where its spec says, with the credentials its Secret holds."""
    from eventhub_balancer import errors
    from eventhub_balancer.adapters import kubeapi

    for flag, dest in LOCATION_FLAGS:
        if getattr(args, dest) is not None:
            raise errors.InvalidInput(
                flag,
                f"EventHubConsumer {args.name} says where its checkpoints are: drop {flag}, "
                "or drop NAME to list a consumer group by flags",
            )
    namespace = consumer_namespace(args)
    api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
    try:
        consumer = await read_consumer(
            api,
            namespace=namespace,
            name=args.name,
            allowed=allowedendpoints.policy(args),
            eventhub=False,  # only the checkpoint store is read
        )
    finally:
        api.close()
    return await list_checkpoints(consumer, owner_id="ehb-checkpoints-list")


async def _list_by_flags(args: argparse.Namespace) -> list[Checkpoint]:
    from eventhub_balancer import errors

    if args.namespace is not None:
        # The old spelling of --eventhub-namespace: without NAME it cannot be Kubernetes'.
        raise errors.InvalidInput(
            "--namespace",
            "is now --eventhub-namespace (the Event Hubs namespace, x.servicebus.windows.net): "
            "-n/--namespace names the Kubernetes namespace of an EventHubConsumer, as in "
            "`ehb checkpoints list NAME -n NAMESPACE`",
        )
    if not args.eventhub_namespace:
        raise errors.InvalidInput(
            "--eventhub-namespace", "give the Event Hubs namespace, x.servicebus.windows.net"
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
    refuse_malformed(connection_string, connectionstrings.blob_problem, source=source)
    # Before any client: --account-url builds the caller's own DefaultAzureCredential.
    allowedendpoints.policy(args).check_blob(
        account_url=None if connection_string else args.account_url,
        connection_string=connection_string,
    )
    return await _list(
        connection_string=connection_string,
        account_url=args.account_url,
        container=args.container,
        namespace=args.eventhub_namespace,
        hub=args.hub,
        consumer_group=args.consumer_group or DEFAULT_CONSUMER_GROUP,
    )


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


# -- shared by ``ehb checkpoints reset | export | import`` (one command a module: see cli/)

#: How to pause, in the refusal of a reset or import (like Kafka's, which needs an idle group).
PAUSE_HINT = (
    "kubectl patch eventhubconsumer {name} -n {namespace} --type merge "
    """-p '{{"spec":{{"paused":true}}}}'"""
)


def add_consumer_arguments(parser: argparse.ArgumentParser) -> None:
    """NAME, -n and --kubeconfig: the EventHubConsumer whose checkpoints are meant (read its
    namespace with `consumer_namespace`)."""
    parser.add_argument("name", help="the EventHubConsumer")
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="its namespace (default: the kubeconfig context's, as kubectl)",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG)")
    allowedendpoints.add_arguments(parser)


def refuse_malformed(
    connection_string: str | None, problem_of: Callable[[str], str | None], *, source: str
) -> None:
    """Refuse a connection string that can never work, saying where it came from (a flag, a
    variable, ``Secret ns/name, key 'k'``), what is wrong and what to write; never the value.

    The endpoint check would refuse it too, but as ``host '' is not allowed``."""
    from eventhub_balancer import errors

    problem = None if connection_string is None else problem_of(connection_string)
    if problem is not None:
        raise errors.InvalidInput(source, problem)


def secret_source(namespace: str, ref: specs.SecretKeyRef) -> str:
    """How a message names the Secret key a connection string was read from."""
    return f"Secret {namespace}/{ref.name}, key {ref.key!r}"


def consumer_namespace(args: argparse.Namespace) -> str:
    """The namespace of NAME: ``-n``, else the kubeconfig context's."""
    from eventhub_balancer.cli import kubecontexts

    return kubecontexts.namespace_of(namespace=args.namespace, kubeconfig=args.kubeconfig)


def require_paused(body: Mapping[str, Any]) -> None:
    """Refuse unless the consumer is paused and the operator says every partition is released.

    ``spec.paused`` alone is not enough: until the operator has revoked every partition by
    hand-off, pods still checkpoint, and one of them could write after the reset.
    """
    from eventhub_balancer import errors
    from eventhub_balancer.contracts import conditions

    meta = body.get("metadata") or {}
    name, namespace = meta.get("name", "NAME"), meta.get("namespace", "default")
    how = PAUSE_HINT.format(name=name, namespace=namespace)
    if (body.get("spec") or {}).get("paused") is not True:
        raise errors.InvalidInput(
            "spec.paused",
            f"EventHubConsumer {namespace}/{name} is not paused; checkpoints are only moved "
            f"while no pod consumes. Pause it first: {how}",
        )
    found = conditions.find((body.get("status") or {}).get("conditions"), conditions.PAUSED)
    generation, observed = meta.get("generation"), (found or {}).get("observedGeneration")
    if found is not None and None not in (generation, observed) and generation != observed:
        found = None  # said of an older spec: the operator has not seen this one yet
    if found is None or found.get("status") != "True":
        state = "missing" if found is None else f"{found.get('status')} ({found.get('reason')})"
        raise errors.InvalidInput(
            "status.conditions[Paused]",
            f"EventHubConsumer {namespace}/{name} has spec.paused but its Paused condition is "
            f"{state}: the operator has not yet released every partition. Wait until "
            f"`kubectl get ehc {name} -n {namespace}` shows it Paused, then run this again",
        )


@dataclasses.dataclass(frozen=True)
class ConsumerTarget:
    """An EventHubConsumer read from the cluster, with what its checkpoints need (no logging:
    the connection strings are secrets)."""

    body: dict[str, Any]
    spec: specs.ConsumerSpec
    eventhub_connection_string: str | None = dataclasses.field(repr=False)
    blob_connection_string: str | None = dataclasses.field(repr=False)

    @property
    def qualified_name(self) -> str:
        meta = self.body.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"

    @property
    def status_epochs(self) -> Mapping[str, Any]:
        epochs = (self.body.get("status") or {}).get("epochs")
        return epochs if isinstance(epochs, Mapping) else {}


async def read_consumer(
    api: Any,
    *,
    namespace: str,
    name: str,
    allowed: endpoints.EndpointPolicy,
    eventhub: bool = True,
) -> ConsumerTarget:
    """The CR and its Secrets' connection strings, read as the operator reads them.

    Raises `errors.InvalidInput` naming the Secret for a connection string that can never
    work (`refuse_malformed`), and `errors.EndpointNotAllowed` unless the checkpoint store
    (and with ``eventhub`` the Event Hub) is where ``allowed`` lets credentials go: checked on
    the very values that `open_store` and the hub client get, before either builds a
    credential.
    """
    body = dict(await api.get_consumer(namespace=namespace, name=name))
    spec = specs.parse_spec(body.get("spec") or {})

    async def secret(creds: specs.Credentials) -> str | None:
        if creds.secret_ref is None:
            return None
        value: str = await api.read_secret_key(
            namespace=namespace, name=creds.secret_ref.name, key=creds.secret_ref.key
        )
        return value

    target = ConsumerTarget(
        body=body,
        spec=spec,
        eventhub_connection_string=await secret(spec.event_hub_credentials),
        blob_connection_string=await secret(spec.checkpoint_credentials),
    )
    shapes: list[tuple[specs.Credentials, str | None, Callable[[str], str | None]]] = [
        (spec.checkpoint_credentials, target.blob_connection_string, connectionstrings.blob_problem)
    ]
    if eventhub:
        shapes.append(
            (
                spec.event_hub_credentials,
                target.eventhub_connection_string,
                connectionstrings.eventhub_problem,
            )
        )
    for creds, value, problem_of in shapes:
        if creds.secret_ref is not None:
            refuse_malformed(value, problem_of, source=secret_source(namespace, creds.secret_ref))
    allowed.check_blob(
        account_url=None
        if target.blob_connection_string
        else (spec.checkpoint_account_url or None),
        connection_string=target.blob_connection_string,
    )
    if eventhub:
        allowed.check_eventhub(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            connection_string=target.eventhub_connection_string,
        )
    return target


async def list_checkpoints(target: ConsumerTarget, *, owner_id: str) -> list[Checkpoint]:
    """``target``'s checkpoints as its store holds them (``owner_id`` only names the reader:
    nothing is written)."""
    from eventhub_balancer.adapters import checkpointing

    spec = target.spec
    async with open_store(target) as container:
        store = checkpointing.CheckpointStore(
            container,
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            consumer_group=spec.consumer_group,
            owner_id=owner_id,
        )
        return await store.list()


def open_store(target: ConsumerTarget) -> Any:
    """The checkpoint container of ``target`` (an async context manager)."""
    from eventhub_balancer.adapters import blobs

    return blobs.open_container(
        container_name=target.spec.checkpoint_container,
        connection_string=target.blob_connection_string,
        account_url=None
        if target.blob_connection_string
        else (target.spec.checkpoint_account_url or None),
    )


class ChangeRow(TypedDict):
    partition: str
    old: CheckpointRow | None
    new: NewCheckpoint


class NewCheckpoint(TypedDict):
    sequenceNumber: int
    offset: str
    owner: str
    epoch: int


def change_rows(changes: Sequence[checkpointresets.Change]) -> list[ChangeRow]:
    from eventhub_balancer.adapters import checkpointresets

    now = datetime.datetime.now(datetime.UTC)
    return [
        ChangeRow(
            partition=c.partition,
            old=rows([c.old], now=now)[0] if c.old is not None else None,
            new=NewCheckpoint(
                sequenceNumber=c.new.sequence_number,
                offset=c.new.offset,
                owner=checkpointresets.RESET_OWNER,
                epoch=c.epoch,
            ),
        )
        for c in changes
    ]


def change_table(items: Sequence[ChangeRow]) -> str:
    """``PARTITION  OLD -> NEW`` (sequence numbers, as the blobs hold them) and the epochs."""
    header = ("PARTITION", "OLD", "", "NEW", "EPOCH")
    lines = []
    for r in items:
        old = r["old"]
        lines.append(
            (
                r["partition"],
                "-" if old is None else str(old["sequenceNumber"]),
                "->",
                str(r["new"]["sequenceNumber"]),
                f"{'-' if old is None else old['epoch']} -> {r['new']['epoch']}",
            )
        )
    return tables.render(header, lines)


async def apply_changes(
    api: Any,
    target: ConsumerTarget,
    blobs: Any,
    changes: Sequence[checkpointresets.Change],
    *,
    reason: str,
    what: str,
) -> list[checkpointresets.Change]:
    """Write each change, then post an Event on the CR saying what was done."""
    import sys

    from eventhub_balancer import errors
    from eventhub_balancer.adapters import checkpointresets
    from eventhub_balancer.reconciling import kubeevents

    written = [
        await checkpointresets.write(blobs, c, status_epochs=target.status_epochs) for c in changes
    ]
    summary = ", ".join(
        f"{c.partition}: {'-' if c.old is None else c.old.sequence_number} -> "
        f"{c.new.sequence_number}"
        for c in written[:16]
    )
    more = f" and {len(written) - 16} more" if len(written) > 16 else ""
    event = kubeevents.KubeEvent(
        reason=reason,
        message=f"{what}: {len(written)} partition(s) of consumer group "
        f"{target.spec.consumer_group} ({summary}{more}), written with epochs above every owner's",
    )
    try:
        await api.create_event(
            namespace=target.body["metadata"]["namespace"],
            body=kubeevents.body(
                cast(Any, target.body), event, now=datetime.datetime.now(datetime.UTC)
            ),
        )
    except errors.EventHubBalancerError as e:
        # The checkpoints are written by now: say so rather than fail as if nothing was done.
        print(
            f"ehb: warning: checkpoints written, but the Event on the CR was not ({e}); "
            "grant `create` on events to record resets",
            file=sys.stderr,
        )
    return written


def print_changes(
    changes: Sequence[checkpointresets.Change], *, as_json: bool, dry_run: bool, header: str
) -> None:
    """The table (or exactly one JSON document on stdout) of what changed or would change."""
    items = change_rows(changes)
    if as_json:
        print(json.dumps({"consumer": header, "dryRun": dry_run, "partitions": items}, indent=2))
        return
    print(header + (" (dry run: nothing written)" if dry_run else ""))
    print(change_table(items))
