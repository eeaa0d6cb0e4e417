"""``ehb deadletters replay``: each chosen dead letter claimed, replayed, then marked.

Event Hubs has no idempotent send and a handler call cannot be undone, so a batch must not
be replayed twice by accident: by two admins running the same replay at once, or by a run
started again after one that was killed. Each blob is read first (all of them, before any
is replayed: a typo in the third name must not leave the first two replayed), then claimed
on the ETag that read saw (`deadletterreplays.DeadLetterReader.claim`): a second run finds
the blob changed and leaves it. The mark or delete after the replay is conditional on that
claim, so a batch its pod wrote again meanwhile stays a dead letter. A replay that fails
gives its claim back; one that was killed leaves it, and the next run says so instead of
replaying the batch again unasked (``--force`` does, deliberately).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import sys
from typing import TYPE_CHECKING, Any

from eventhub_balancer.cli import commandlines, consumertargets, tables

if TYPE_CHECKING:
    from eventhub_balancer.adapters import deadletterreplays, deliveries
    from eventhub_balancer.consumer import processing

#: The pod name a handler sees in its context during ``replay --through-handler``.
REPLAY_POD = "ehb-deadletters-replay"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def unfinished(short_name: str, since: str) -> str:
    """What is said of a blob whose replay started at ``since`` and never marked it."""
    return (
        f"{short_name}: a replay started at {since} has not finished: another run is replaying "
        "it, or one was stopped part-way and may have replayed it in part or whole; once no "
        "other run is at it, give --force to replay it again"
    )


def interrupted(short_name: str, results: list[dict[str, Any]]) -> str:
    """What is said when Ctrl-C stops a replay: the blob it leaves claimed, and what it did."""
    done = [str(r["blob"]) for r in results if str(r["result"]).startswith("replayed")]
    return (
        f"interrupted while replaying {short_name}: it stays claimed (`ehb deadletters list` "
        "shows it unfinished) and may have been replayed in part or whole; check, then replay "
        "it with --force; "
        + (f"replayed before it: {', '.join(done)}" if done else "nothing was replayed before it")
    )


def stopped(
    error: Exception,
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    left: list[deadletterreplays.DeadLetter],
) -> Exception:
    """The error that ends a replay stopped by ``error`` at ``left[0]``: what it replayed
    before, what it did not, and how to finish.

    Once a dead letter was replayed, the same command with BLOB names would refuse it as
    replayed, and with ``--force`` would replay it twice: the line names the blobs to give
    instead, and the run exits 1, not 75 ("run it again"). With nothing replayed yet, the
    error keeps its kind (75 when the hub or the store did not answer)."""
    from eventhub_balancer import errors

    done = [str(r["blob"]) for r in results if str(r["result"]).startswith("replayed")]
    names = [x.short_name for x in left]
    if args.all or not done:
        finish = "run the same command again"
        if args.all:
            finish += " (--all replays only what is not marked replayed)"
    else:
        line = commandlines.again(
            args, ("deadletters", "replay"), names=names, drop=("all", "blobs", "dry_run")
        )
        finish = f"replay those: {line}"
    message = (
        f"{error}; "
        + (f"replayed before it: {', '.join(done)}" if done else "nothing was replayed before it")
        + f"; not replayed: {', '.join(names)}: {finish}"
    )
    if done:
        return errors.ConfigurationError(message)
    if isinstance(error, errors.InvalidInput):
        return errors.InvalidInput(error.field, message.removeprefix(f"{error.field}: "))
    if isinstance(error, errors.TransientError):
        return errors.TransientError(message)
    return errors.ConfigurationError(message)


def load_handler(args: argparse.Namespace) -> Any:
    """``--through-handler``, imported and checked as ``ehb consume --handler`` is (plain
    mode): a syntax error, a module failing at import or a wrong signature is one line, which
    names the flag replay has."""
    from eventhub_balancer import errors
    from eventhub_balancer.consumer import protocols

    try:
        return protocols.load(
            args.through_handler,
            search_path=args.handler_path,
            spark=False,
            remedy="replay it with --to-hub instead, and the consumer's pods process the events "
            "again (--through-handler calls a handler in plain mode only)",
        )
    except errors.InvalidInput as e:
        if e.field != "--handler":
            raise
        raise errors.InvalidInput("--through-handler", e.problem) from e


async def replay(
    args: argparse.Namespace,
    target: consumertargets.ConsumerTarget,
    reader: deadletterreplays.DeadLetterReader,
) -> tuple[Any, str, list[str]]:
    """The result rows, their table, and one problem per dead letter left as it was."""
    from eventhub_balancer import errors
    from eventhub_balancer.adapters import deadletters
    from eventhub_balancer.consumer import processing

    if args.all:
        chosen = [name for name, _ in await reader.names()]
    else:
        chosen = list(dict.fromkeys(reader.resolve(b) for b in args.blobs))
    loaded = []
    for name in chosen:
        fetched = await reader.fetch(name)
        letter = reader.summary(name, fetched.body, fetched.metadata)
        if not args.force and not args.all:
            if letter.replaying_since:
                raise errors.InvalidInput(
                    "--force", unfinished(letter.short_name, letter.replaying_since)
                )
            if letter.replayed_time:
                raise errors.InvalidInput(
                    "--force",
                    f"{letter.short_name} was replayed at {letter.replayed_time} "
                    f"({letter.replayed_to}); give --force to replay it again",
                )
        loaded.append((letter, fetched, deadletters.decode_events(fetched.body)))
    destination = "hub"
    processor: processing.PlainProcessor | None = None
    if args.through_handler:
        destination = f"handler:{args.through_handler}"
        processor = processing.PlainProcessor(load_handler(args))

    results: list[dict[str, Any]] = []
    problems: list[str] = []
    for index, (letter, fetched, events) in enumerate(loaded):
        if letter.replaying_since and not args.force:
            outcome = "skipped (unfinished replay: --force)"
            problems.append(unfinished(letter.short_name, letter.replaying_since))
        elif letter.replayed_time and not args.force:
            outcome = "skipped (replayed before: --force)"
        elif args.dry_run:
            outcome = "would replay"
        else:
            try:
                outcome, problem = await _replay_one(
                    args, target, reader, letter, fetched, events, processor, destination
                )
            except (asyncio.CancelledError, KeyboardInterrupt):
                print(f"ehb: error: {interrupted(letter.short_name, results)}", file=sys.stderr)
                raise
            except errors.EventHubBalancerError as e:
                rest = [
                    (x, n) for x, _, n in loaded[index + 1 :] if args.force or not x.replayed_time
                ]
                if args.json:
                    # A script still gets its one document: what was replayed, and what not.
                    failed = _row(letter, len(events), destination, "failed")
                    left = [_row(x, len(n), destination, "not replayed") for x, n in rest]
                    print(json.dumps([*results, failed, *left], indent=2, ensure_ascii=False))
                raise stopped(e, args, results, [letter, *(x for x, _ in rest)]) from e
            if problem:
                problems.append(problem)
        results.append(_row(letter, len(events), destination, outcome))
    if not results:
        return results, "no dead letters to replay", problems
    header = ("BLOB", "EVENTS", "TO", "RESULT")
    lines = [(str(r["blob"]), str(r["events"]), str(r["to"]), str(r["result"])) for r in results]
    return results, tables.render(header, lines), problems


def _row(
    letter: deadletterreplays.DeadLetter, events: int, destination: str, result: str
) -> dict[str, Any]:
    """One dead letter's line of the result, as ``--json`` prints it."""
    return {
        "blob": letter.short_name,
        "name": letter.name,
        "events": events,
        "to": destination,
        "result": result,
    }


async def _replay_one(
    args: argparse.Namespace,
    target: consumertargets.ConsumerTarget,
    reader: deadletterreplays.DeadLetterReader,
    letter: deadletterreplays.DeadLetter,
    fetched: deadletterreplays.Fetched,
    events: list[deliveries.ReceivedEvent],
    processor: processing.PlainProcessor | None,
    destination: str,
) -> tuple[str, str | None]:
    """Claim, replay and mark one dead letter: its result, and a problem when it was left."""
    from eventhub_balancer import errors
    from eventhub_balancer.adapters import deadlettersends
    from eventhub_balancer.consumer import contexts
    from eventhub_balancer.contracts import partitionreports

    # The hub's address is settled before the claim: a refusal leaves the blob as it was.
    coordinates = None if processor is not None else consumertargets.hub_coordinates(target)
    claim = await reader.claim(letter.name, fetched, now=_now())
    if claim is None:
        return "skipped (changed since read)", (
            f"{letter.short_name}: it changed while this replay ran (another replay took it, "
            "or its pod wrote the batch again): nothing was replayed from it; see "
            "`ehb deadletters list` and replay it again if it is still not replayed"
        )
    try:
        if processor is not None:
            context = contexts.BatchContext(
                partition=letter.partition,
                epoch=letter.epoch,
                consumer=args.name,
                pod=REPLAY_POD,
                first_sequence_number=letter.first_sequence_number,
                last_sequence_number=letter.last_sequence_number,
                size=len(events),
            )
            try:
                await processor(events, context)
            except Exception as e:
                said = partitionreports.first_line(f"{type(e).__name__}: {e}")
                raise errors.ConfigurationError(
                    f"the handler failed on {letter.short_name} ({said}); it stays a dead "
                    "letter, unmarked: fix the handler and replay it again"
                ) from e
        elif coordinates is not None:
            await deadlettersends.replay_to_hub(coordinates, events, replay_of=letter.name)
    except errors.EventHubBalancerError:
        # Failed, not killed: the claim goes, so the blob reads as not replayed. A store that
        # refuses this too leaves the claim, which the next run reports.
        with contextlib.suppress(errors.EventHubBalancerError):
            await reader.release(letter.name, fetched, etag=claim)
        raise
    if args.delete_after:
        done = await reader.delete(letter.name, etag=claim)
        outcome = "replayed, deleted"
    else:
        done = await reader.mark_replayed(letter.name, to=destination, now=_now(), etag=claim)
        outcome = "replayed"
    if done:
        return outcome, None
    return "replayed, not marked (changed meanwhile)", (
        f"{letter.short_name}: replayed, but the blob changed meanwhile (its pod wrote the batch "
        "again, or another run deleted it), so it was neither marked nor deleted: see "
        "`ehb deadletters list`"
    )
