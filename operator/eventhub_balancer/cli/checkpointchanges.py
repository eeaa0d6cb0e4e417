"""Writing the changes of ``ehb checkpoints reset`` and ``import``: one partition at a time,
then an Event on the CR and the old -> new table.

The partitions are written one by one, each with its own conditional write: a store that
gives up, or a Ctrl-C, can stop the command between two of them. What was written then stays
written (moving it back would be one more write that can fail), so the command says which
partitions it reset and which it did not, and the command that finishes the job: the same
target on the partitions left (``--partitions``). Running the whole reset again would be
wrong for ``--shift-by``, which moves the checkpoint it finds: the partitions already moved
would move twice. The Event on the CR records the partitions written, also when the command
failed after them.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

from eventhub_balancer.cli import checkpoints, checkpointwaits, consumertargets, tables

if TYPE_CHECKING:
    from eventhub_balancer.adapters import checkpointresets
    from eventhub_balancer.contracts import startpositions


#: How long an interrupted reset or import tries to post the Event of what it wrote.
INTERRUPTED_EVENT_S = 5.0


class NewCheckpoint(TypedDict):
    sequenceNumber: int
    offset: str
    owner: str
    epoch: int
    #: The events the partition holds past it (None: not read, as by an import).
    waiting: int | None


class ChangeRow(TypedDict):
    partition: str
    old: checkpoints.CheckpointRow | None
    new: NewCheckpoint


def change_rows(changes: Sequence[checkpointresets.Change]) -> list[ChangeRow]:
    """Each change's old and new checkpoint; with the partition's bounds (a reset reads them),
    the events waiting after each, so that the table says how many a reset skips or replays."""
    from eventhub_balancer.adapters import checkpointresets

    now = datetime.datetime.now(datetime.UTC)
    rows = []
    for c in changes:
        old = None
        if c.old is not None:
            (old,) = checkpoints.rows([c.old], now=now)
            old["waiting"] = _waiting(c.limits, c.old.sequence_number)
        new = NewCheckpoint(
            sequenceNumber=c.new.sequence_number,
            offset=c.new.offset,
            owner=checkpointresets.RESET_OWNER,
            epoch=c.epoch,
            waiting=_waiting(c.limits, c.new.sequence_number),
        )
        rows.append(ChangeRow(partition=c.partition, old=old, new=new))
    return rows


def _waiting(limits: startpositions.PartitionBounds | None, sequence_number: int) -> int | None:
    """The events after ``sequence_number``, where a reset read the bounds."""
    return None if limits is None else checkpointwaits.events_waiting(limits, sequence_number)


def change_table(items: Sequence[ChangeRow]) -> str:
    """``PARTITION  OLD -> NEW`` (sequence numbers, as the blobs hold them), the epochs, and
    where a reset read the bounds the events waiting before and after: ``1,873 -> 0`` skips
    1,873 events, ``0 -> 52,000`` replays 52,000."""
    header = ["PARTITION", "OLD", "", "NEW", "EPOCH"]
    counted = any(r["new"]["waiting"] is not None for r in items)
    lines = []
    for r in items:
        old = r["old"]
        line = [
            r["partition"],
            "-" if old is None else str(old["sequenceNumber"]),
            "->",
            str(r["new"]["sequenceNumber"]),
            f"{'-' if old is None else old['epoch']} -> {r['new']['epoch']}",
        ]
        if counted:
            before = None if old is None else old["waiting"]
            line.append(f"{checkpoints.count(before)} -> {checkpoints.count(r['new']['waiting'])}")
        lines.append(line)
    if counted:
        header.append("WAITING")
    return tables.render(header, lines)


def _move(change: checkpointresets.Change) -> str:
    """``5 -> 3``: the sequence number a partition was moved from and to."""
    old = "-" if change.old is None else str(change.old.sequence_number)
    return f"{old} -> {change.new.sequence_number}"


def stopped_after(
    written: Sequence[checkpointresets.Change],
    left: Sequence[str],
    finish: Callable[[Sequence[str]], str],
) -> str:
    """What a command stopped part-way did, and the command that finishes it."""
    done = "; ".join(f"partition {c.partition} was reset ({_move(c)})" for c in written)
    plural = len(left) > 1
    return (
        f"{done or 'no partition was reset'}; partition{'s' if plural else ''} "
        f"{', '.join(left)} {'were' if plural else 'was'} not: run {finish(left)} to finish "
        "(`ehb checkpoints list` shows where each partition stands)"
    )


async def apply_changes(
    api: Any,
    target: consumertargets.ConsumerTarget,
    blobs: Any,
    changes: Sequence[checkpointresets.Change],
    *,
    reason: str,
    what: str,
    finish: Callable[[Sequence[str]], str],
) -> list[checkpointresets.Change]:
    """Write each change, then post an Event on the CR saying what was done.

    A write that fails (or a Ctrl-C) stops the rest; the error then says what was written and
    how to finish (``finish`` gives the command for the partitions left), and the Event
    records what was written.
    """
    from eventhub_balancer import errors
    from eventhub_balancer.adapters import checkpointresets

    written: list[checkpointresets.Change] = []
    try:
        for change in changes:
            written.append(
                await checkpointresets.write(blobs, change, status_epochs=target.status_epochs)
            )
    except errors.EventHubBalancerError as e:
        if written:
            await _post_event(api, target, written, reason=reason, what=what)
        left = [c.partition for c in changes[len(written) :]]
        message = f"{e}; {stopped_after(written, left, finish)}"
        if isinstance(e, errors.TransientError) and not written:
            # Nothing written: the same command may simply be run again (exit 75).
            raise errors.CheckpointStoreUnreachable(message) from e
        # Part written: the same command again would move those partitions a second time
        # (--shift-by), so not "ask again later" (exit 1); the message gives the command.
        raise errors.ConfigurationError(message) from e
    except (asyncio.CancelledError, KeyboardInterrupt):
        left = [c.partition for c in changes[len(written) :]]
        print(f"ehb: error: interrupted: {stopped_after(written, left, finish)}", file=sys.stderr)
        if written:
            await _post_interrupted(api, target, written, reason=reason, what=what)
        raise
    try:
        await _post_event(api, target, written, reason=reason, what=what)
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Done, though no table will say so: this line does.
        done = "; ".join(f"partition {c.partition} was reset ({_move(c)})" for c in written)
        print(
            "ehb: error: interrupted while posting the Event on the CR, after every partition "
            f"was written: {done}",
            file=sys.stderr,
        )
        raise
    return written


async def _post_interrupted(
    api: Any,
    target: consumertargets.ConsumerTarget,
    written: Sequence[checkpointresets.Change],
    *,
    reason: str,
    what: str,
) -> None:
    """The Event of what an interrupted command wrote, given `INTERRUPTED_EVENT_S` at most:
    who pressed Ctrl-C wants the prompt back, not a wait on a hung API server."""
    try:
        await asyncio.wait_for(
            _post_event(api, target, written, reason=reason, what=what),
            timeout=INTERRUPTED_EVENT_S,
        )
    except TimeoutError:
        print(
            f"ehb: warning: checkpoints written, but the Event on the CR was not posted within "
            f"{INTERRUPTED_EVENT_S:g} s",
            file=sys.stderr,
        )


async def _post_event(
    api: Any,
    target: consumertargets.ConsumerTarget,
    written: Sequence[checkpointresets.Change],
    *,
    reason: str,
    what: str,
) -> None:
    from eventhub_balancer import errors
    from eventhub_balancer.reconciling import kubeevents

    moves = [f"{c.partition}: {_move(c)}" for c in written]
    more = f" and {len(moves) - 16} more" if len(moves) > 16 else ""
    event = kubeevents.KubeEvent(
        reason=reason,
        message=f"{what}: {len(written)} partition(s) of consumer group "
        f"{target.spec.consumer_group} ({', '.join(moves[:16])}{more}), written with epochs "
        "above every owner's",
    )
    try:
        await api.create_event(
            namespace=target.body["metadata"]["namespace"],
            body=kubeevents.body(
                cast(Any, target.body), event, now=datetime.datetime.now(datetime.UTC)
            ),
        )
    except errors.EventHubBalancerError as e:
        from eventhub_balancer import cli

        # The checkpoints are written by now: say so rather than fail as if nothing was done.
        # The right is the caller's: a 403's advice for the operator's ServiceAccount goes.
        problem = str(e).replace(f"; {cli.OPERATOR_ADVICE}", "")
        print(
            f"ehb: warning: checkpoints written, but the Event on the CR was not ({problem}); "
            "grant `create` on events to record resets",
            file=sys.stderr,
        )


def print_changes(
    changes: Sequence[checkpointresets.Change],
    *,
    as_json: bool,
    dry_run: bool,
    header: str,
    consumer: str,
    change: Mapping[str, str],
) -> None:
    """The table (or exactly one JSON document on stdout) of what changed or would change.

    The table's ``header`` says on one line whose checkpoints and what was asked; the JSON
    keeps them apart, ``consumer`` (namespace/name, what a script looks the consumer up by)
    and ``change`` (``{"target": "--to-latest"}``, ``{"file": "backup.json"}``).
    """
    items = change_rows(changes)
    if as_json:
        document = {"consumer": consumer, **change, "dryRun": dry_run, "partitions": items}
        print(json.dumps(document, indent=2))
        return
    print(header + (" (dry run: nothing written)" if dry_run else ""))
    print(change_table(items))
