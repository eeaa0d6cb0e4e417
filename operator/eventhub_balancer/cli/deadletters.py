"""``ehb deadletters list | show | replay``: the batches a consumer gave up on, and their way back.

With ``spec.processing.onFailure: deadLetter`` the pods park a batch that kept failing as a
blob beside the checkpoints (``adapters.deadletters``) and move on. Once the cause is fixed
(a bug in the handler, a downstream system that was down) someone has to look at those
batches and drive them again; this is that tool. ``replay`` sends the events back into the
hub (``--to-hub``: the fixed consumers read them like new ones) or runs them through a
handler here (``--through-handler``: nothing else sees them). A replayed blob is marked in
its metadata, so a second replay of the same batch needs ``--force``.

The coordinates (namespace, hub, consumer group, container) come from the EventHubConsumer,
read through the Kubernetes API, so that nobody retypes them. So does the identity: the CR's
Secrets, or its ServiceAccount's federated identity (`actingidentities`). The runner's own
credentials (``--connection-string``, ``--account-url``, ``--eventhub-connection-string``,
their variables, or ``--use-my-identity``) are used only for a host bound to the CR's
namespace: otherwise a tenant's CR could send the runner's token, and the tenant's events,
to another tenant's hub. Nothing here prints a credential.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from eventhub_balancer.cli import actingidentities, consumertargets, flagtypes, tables
from eventhub_balancer.contracts import (
    bounds,
    conditions,
    connectionstrings,
    failurepolicy,
    timestamps,
)

if TYPE_CHECKING:
    from eventhub_balancer.adapters import deadletterreplays

COMMAND = ("deadletters",)
HELP = "list, show and replay the batches a consumer dead-lettered"

#: Where the connection strings come from when the flags are absent (flags show up in `ps`).
#: The blob one is the same variable ``ehb checkpoints list`` reads.
BLOB_CONNECTION_STRING_ENV = connectionstrings.ENV_BLOB_CONNECTION_STRING
EVENTHUB_CONNECTION_STRING_ENV = connectionstrings.ENV_EVENTHUB_CONNECTION_STRING


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser(
        "list",
        help="each dead-lettered batch: partition, sequence range, events, error, when, pod",
    )
    _common(listing)
    listing.add_argument(
        "--partition", type=flagtypes.partition_id, help="only this partition's dead letters"
    )
    showing = actions.add_parser("show", help="one dead letter's events and error")
    _common(showing)
    showing.add_argument("blob", metavar="BLOB", help="as `list` prints it (e.g. 0/5-6)")
    replaying = actions.add_parser(
        "replay", help="send dead letters back into the hub, or run them through a handler"
    )
    _common(replaying)
    replaying.add_argument(
        "blobs",
        metavar="BLOB",
        nargs="*",
        help="as `list` prints them (e.g. 0/5-6), anywhere after NAME",
    )
    # argparse takes a list of positionals in one place only: the names given after a flag
    # are added by `cli.main`, not refused as unknown.
    replaying.set_defaults(_trailing="blobs")
    replaying.add_argument(
        "--all", action="store_true", help="every dead letter not replayed yet (with --force: all)"
    )
    target = replaying.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to-hub", action="store_true", help="send the events back into the Event Hub"
    )
    target.add_argument(
        "--through-handler",
        metavar="MODULE:FUNCTION",
        help="call this handler with the events (plain mode), here and now",
    )
    replaying.add_argument(
        "--handler-path",
        action="append",
        default=[],
        help="a directory to import the handler from (repeatable)",
    )
    replaying.add_argument(
        "--dry-run", action="store_true", help="print what would be replayed; change nothing"
    )
    replaying.add_argument(
        "--delete-after", action="store_true", help="delete each blob once it was replayed"
    )
    replaying.add_argument(
        "--force", action="store_true", help="replay blobs that were replayed before too"
    )
    replaying.add_argument(
        "--eventhub-connection-string",
        help=f"Event Hubs connection string with Send rights, yours (default: "
        f"${EVENTHUB_CONNECTION_STRING_ENV}, else the identity the CR declares); only for a "
        "host bound to the CR's namespace (--bind-location)",
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", metavar="NAME", type=flagtypes.consumer_name, help="the EventHubConsumer"
    )
    consumertargets.add_arguments(parser, name=False)
    credentials = parser.add_mutually_exclusive_group()
    credentials.add_argument(
        "--connection-string",
        help=f"storage connection string, yours (default: ${BLOB_CONNECTION_STRING_ENV}, else "
        "the identity the CR declares); only for a host bound to the CR's namespace",
    )
    credentials.add_argument(
        "--account-url",
        type=flagtypes.account_url,
        help="https://<account>.blob.core.windows.net, with your DefaultAzureCredential; only "
        "for a host bound to the CR's namespace",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")


# --- output ---


def row(letter: deadletterreplays.DeadLetter) -> dict[str, Any]:
    """A dead letter as ``list --json`` prints it (and as the table is built from)."""
    from eventhub_balancer.adapters import deadletters

    return {
        "blob": letter.short_name,
        "name": letter.name,
        "partition": letter.partition,
        "firstSequenceNumber": letter.first_sequence_number,
        "lastSequenceNumber": letter.last_sequence_number,
        "events": letter.events,
        "error": deadletters.first_line(letter.error),
        "attempts": letter.attempts,
        "pod": letter.pod,
        "epoch": letter.epoch,
        "deadLetteredTime": letter.dead_lettered_time,
        "replayedTime": letter.replayed_time,
        "replayedTo": letter.replayed_to,
        "replayingSince": letter.replaying_since,
    }


def list_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as ``list`` prints them. The error is the last column and whole: it is the
    first line a report shows (`deadletters.first_line`, bounded), and what failed is at its
    end (``NotAnOrder: partition 3 sequence number 110: not an order (JSONDecodeError: ...)``).
    Times are to the second; ``--json`` keeps them as the pod wrote them."""
    header = ("BLOB", "PARTITION", "SEQUENCES", "EVENTS", "WHEN", "POD", "REPLAYED", "ERROR")
    lines = [
        (
            r["blob"],
            r["partition"],
            failurepolicy.sequence_numbers(r["firstSequenceNumber"], r["lastSequenceNumber"]),
            str(r["events"]),
            _when(r["deadLetteredTime"]),
            r["pod"] or "-",
            _replayed_column(r),
            r["error"] or "-",
        )
        for r in rows
    ]
    return tables.render(header, lines)


def _when(value: str | None) -> str:
    """A time the pod or a replay wrote, to the second in UTC (``2026-12-07T02:25:59Z``); as
    written when it cannot be read (a blob edited by hand), and ``-`` when there is none."""
    if not value:
        return "-"
    parsed = timestamps.parse_time(value)
    return timestamps.format_time(parsed) if parsed else value


def _replayed_column(r: dict[str, Any]) -> str:
    if r["replayingSince"]:
        return f"started {_when(r['replayingSince'])}, unfinished"
    return _when(r["replayedTime"])


def show_text(letter: deadletterreplays.DeadLetter, body: dict[str, Any]) -> str:
    lines = [
        f"{letter.name}",
        f"  partition {letter.partition}, sequence numbers "
        f"{letter.first_sequence_number}-{letter.last_sequence_number}, "
        f"{conditions.amount(letter.events, 'event')}",
        f"  dead-lettered {letter.dead_lettered_time} by {letter.pod} (epoch {letter.epoch}) "
        f"after {conditions.amount(letter.attempts, 'attempt')}",
        f"  replayed: started {letter.replaying_since}, not finished (a replay in progress, or "
        "one that was stopped: --force replays it again)"
        if letter.replaying_since
        else f"  replayed: {letter.replayed_time} to {letter.replayed_to}"
        if letter.replayed_time
        else "  replayed: never",
        "  error:",
        *[f"    {line}" for line in letter.error.splitlines() or ["-"]],
        "  events:",
    ]
    for e in body.get("events") or []:
        key = e.get("partitionKey")
        lines.append(
            f"    #{e.get('sequenceNumber')} offset {e.get('offset')} "
            f"enqueued {e.get('enqueuedTime')}" + (f" key {key}" if key is not None else "")
        )
        if e.get("properties"):
            lines.append(f"      properties: {json.dumps(e['properties'], ensure_ascii=False)}")
        lines.append(f"      body ({e.get('bodyEncoding')}): {e.get('body')}")
    # What producers and handlers wrote, as text: its lines stay lines, and any other
    # character a terminal would act on is shown as its escape (`bounds.printable`).
    return "\n".join(bounds.printable(part) for part in "\n".join(lines).split("\n"))


# --- the runner's own credentials ---


def _runner_store(args: argparse.Namespace) -> actingidentities.RunnerCredential | None:
    """The checkpoint store's credential the runner gave (a flag, else the variable)."""
    if args.account_url is not None:
        return actingidentities.RunnerCredential(
            source="--account-url", account_url=args.account_url
        )
    source, value = "--connection-string", args.connection_string
    if value is None:
        source, value = BLOB_CONNECTION_STRING_ENV, os.environ.get(BLOB_CONNECTION_STRING_ENV)
    if not value:
        return None
    consumertargets.refuse_malformed(value, connectionstrings.blob_problem, source=source)
    return actingidentities.RunnerCredential(source=source, connection_string=value)


def _runner_hub(args: argparse.Namespace) -> actingidentities.RunnerCredential | None:
    """The Event Hub's credential the runner gave (a flag, else the variable)."""
    source, value = "--eventhub-connection-string", args.eventhub_connection_string
    if value is None:
        source = EVENTHUB_CONNECTION_STRING_ENV
        value = os.environ.get(EVENTHUB_CONNECTION_STRING_ENV)
    if not value:
        return None
    consumertargets.refuse_malformed(value, connectionstrings.eventhub_problem, source=source)
    return actingidentities.RunnerCredential(source=source, connection_string=value)


# --- the commands ---


def run(args: argparse.Namespace) -> int:
    import asyncio

    from eventhub_balancer import errors

    if args.action == "replay":
        if args.all and args.blobs:
            raise errors.InvalidInput("--all", "give BLOB names or --all, not both")
        if not args.all and not args.blobs:
            raise errors.InvalidInput("BLOB", "name the dead letters to replay, or give --all")
    document, text, malformed = asyncio.run(_run(args))
    print(json.dumps(document, indent=2, ensure_ascii=False) if args.json else text)
    # `list` shows the readable dead letters and names each blob it could not read, `replay`
    # each dead letter it left as it was: the status says the work is not whole.
    for problem in malformed:
        print(f"ehb: error: {problem}", file=sys.stderr)
    return 1 if malformed else 0


async def _run(args: argparse.Namespace) -> tuple[Any, str, list[str]]:
    from eventhub_balancer.adapters import deadletterreplays, kubeapi
    from eventhub_balancer.cli import deadletterreplaying

    namespace = consumertargets.consumer_namespace(args)
    api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
    # The hub is reached only by a replay into it: its identity is settled (or refused) now,
    # before any blob is read or marked.
    sends = args.action == "replay" and bool(args.to_hub) and not args.dry_run
    try:
        target = await consumertargets.read_consumer(
            api,
            args,
            namespace=namespace,
            name=args.name,
            eventhub=sends,
            runner_store=_runner_store(args),
            runner_hub=_runner_hub(args) if sends else None,
        )
        spec = target.spec
        async with consumertargets.open_store(target) as container:
            reader = deadletterreplays.DeadLetterReader(
                container,
                fully_qualified_namespace=spec.fully_qualified_namespace,
                eventhub_name=spec.event_hub_name,
                consumer_group=spec.consumer_group,
            )
            if args.action == "list":
                listing = await reader.list(partition=args.partition)
                rows = [row(letter) for letter in listing.letters]
                empty = "no readable dead letters" if listing.malformed else "no dead letters"
                return rows, list_table(rows) if rows else empty, listing.malformed
            if args.action == "show":
                name = reader.resolve(args.blob)
                body, metadata = await reader.read(name)
                letter = reader.summary(name, body, metadata)
                document = {**row(letter), "error": letter.error, "body": body}
                return document, show_text(letter, dict(body)), []
            return await deadletterreplaying.replay(args, target, reader)
    finally:
        api.close()
