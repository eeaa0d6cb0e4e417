"""The events each checkpoint has still to go, for ``ehb checkpoints list NAME``.

The first question on call is how far behind each partition is. The pods' metrics say it only
for the partitions a pod holds (``ehb_consumer_lag_events``): a partition no pod holds, in an
outage or while the consumer is paused, exports nothing, and its backlog is what matters most.
The blobs hold where each partition's processing stands; Event Hubs holds where the partition
ends. This reads the second, with the identity the EventHubConsumer declares for its hub (as
``ehb checkpoints reset`` does), and counts the events the partition still holds past its
checkpoint (`startpositions.PartitionBounds.waiting_after`: those retention removed wait for
no one).

Without NAME (a consumer group no EventHubConsumer manages, an SDK's during a move to the
operator) the runner gives the hub's identity: ``--eventhub-connection-string`` or
`EVENTHUB_CONNECTION_STRING_ENV` (`by_flags`), else, with ``--account-url``, the runner's own
``DefaultAzureCredential``, as for the blobs. With neither, the listing has no column.

Reading the hub is a bonus to the listing, not its purpose: a hub that cannot be read (its
Secret gone, its identity refused, the namespace not answering) leaves the counts out, says
why in one line on stderr, and the checkpoints are listed all the same. Every read is bounded:
all partitions share one `READ_TIMEOUT_S`, at most `PARALLEL_READS` at once over one client.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from eventhub_balancer import errors
from eventhub_balancer.cli import allowedendpoints, consumertargets
from eventhub_balancer.contracts import connectionstrings, endpoints

if TYPE_CHECKING:
    from eventhub_balancer.adapters import receiving
    from eventhub_balancer.adapters.checkpointing import Checkpoint
    from eventhub_balancer.contracts import startpositions

#: How long the whole hub may take to say where its partitions end (one management call a
#: partition): a hub that does not answer delays the listing by this much, never by a call
#: timeout per partition.
READ_TIMEOUT_S: Final = 15.0
#: How many partitions are asked at once, as a reset asks them.
PARALLEL_READS: Final = 8
#: Without NAME, where the hub's connection string comes from when the flag is absent (flags
#: show up in `ps`); the variable ``ehb deadletters replay`` reads too.
EVENTHUB_CONNECTION_STRING_ENV: Final = connectionstrings.ENV_EVENTHUB_CONNECTION_STRING
#: Without NAME, what to check when the hub cannot be read, instead of the CR's fields.
FLAGS_HINT: Final = "check --eventhub-namespace, --hub and the Event Hubs credentials"


@dataclasses.dataclass(frozen=True)
class Waiting:
    """The events waiting after each partition's checkpoint; ``problem``: why some or all are
    not known (they are absent from ``counts``). ``past_end``: the partitions whose checkpoint
    is past their last event (with that event's sequence number), counted nowhere: the hub
    was created again under its name, or the blob edited, and a count of 0 would hide that
    their events are not being processed."""

    counts: Mapping[str, int]
    problem: str | None = None
    past_end: Mapping[str, int] = dataclasses.field(default_factory=dict)


async def read(
    api: Any,
    args: argparse.Namespace,
    target: consumertargets.ConsumerTarget,
    checkpoints: Sequence[Checkpoint],
) -> Waiting:
    """How many events wait after each of ``checkpoints``, read from ``target``'s hub."""
    if not checkpoints:
        return Waiting({})
    try:
        target = await consumertargets.with_hub(api, args, target)
    except errors.EventHubBalancerError as e:
        return Waiting({}, problem=str(e))
    address = consumertargets.hub_address(target)
    try:
        return await _count(address, checkpoints)
    finally:
        await consumertargets.close_credential(address)


@dataclasses.dataclass(frozen=True)
class HubByFlags:
    """Without NAME: how the runner said to reach the hub (a connection string, or None for
    their own ``DefaultAzureCredential``)."""

    connection_string: str | None


def by_flags(args: argparse.Namespace) -> HubByFlags | None:
    """The hub's identity the runner gave without NAME, checked before any client exists; None
    when they gave none (the listing then has no ``WAITING`` column).

    A connection string must name the hub whose checkpoints are listed: its namespace (except
    the development emulator's, which names ``localhost`` whatever the blobs say) and, when it
    has one, its ``EntityPath``. Counts read from another hub would pass for this one's."""
    source, value = "--eventhub-connection-string", args.eventhub_connection_string
    if value is None:
        source = EVENTHUB_CONNECTION_STRING_ENV
        value = os.environ.get(EVENTHUB_CONNECTION_STRING_ENV) or None  # empty: unset
    if value is None:
        if args.account_url is None:
            return None
        # The runner's own token goes to --eventhub-namespace: only a host the operator allows.
        allowedendpoints.policy(args).check_eventhub(
            fully_qualified_namespace=args.eventhub_namespace,
            connection_string=None,
            field="--eventhub-namespace",
        )
        return HubByFlags(None)
    consumertargets.refuse_malformed(value, connectionstrings.eventhub_problem, source=source)
    fields = endpoints.connection_string_fields(value, field=source)
    named = endpoints.host(fields.get("endpoint", ""))
    wanted = endpoints.host(args.eventhub_namespace)
    if fields.get("usedevelopmentemulator") != "true" and named != wanted:
        raise errors.InvalidInput(
            source,
            f"names the Event Hubs namespace {named}, not --eventhub-namespace {wanted}: give "
            "the connection string of the namespace whose checkpoints are listed",
        )
    entity = fields.get("entitypath")
    if entity is not None and entity != args.hub:
        raise errors.InvalidInput(
            source,
            f"is for the Event Hub {entity!r}, not --hub {args.hub!r}: give one for "
            f"{args.hub!r}, or the namespace's (without EntityPath)",
        )
    allowedendpoints.policy(args).check_eventhub(
        fully_qualified_namespace=args.eventhub_namespace, connection_string=value
    )
    return HubByFlags(value)


async def read_by_flags(
    args: argparse.Namespace,
    hub: HubByFlags,
    checkpoints: Sequence[Checkpoint],
    *,
    consumer_group: str,
) -> Waiting:
    """How many events wait after each of ``checkpoints``, read from the hub the flags name
    (without a connection string, with the runner's own ``DefaultAzureCredential``, as the
    blobs were listed with: `receivecredentials.shared` makes and closes it)."""
    from eventhub_balancer.adapters import receivecredentials, receiving

    if not checkpoints:
        return Waiting({})
    address = receiving.EventHubAddress(
        fully_qualified_namespace=args.eventhub_namespace,
        eventhub_name=args.hub,
        consumer_group=consumer_group,
        connection_string=hub.connection_string,
    )
    async with receivecredentials.shared(address) as reading:
        return await _count(reading, checkpoints, hint=FLAGS_HINT)


async def _count(
    address: receiving.EventHubAddress,
    checkpoints: Sequence[Checkpoint],
    *,
    hint: str | None = None,
) -> Waiting:
    """The counts over one client; ``hint``: what a failed read says to check (default: the
    CR's fields, `checkpointresets.SPEC_HINT`)."""
    from eventhub_balancer.adapters import checkpointresets

    hint = hint or checkpointresets.SPEC_HINT

    counts: dict[str, int] = {}
    past_end: dict[str, int] = {}
    failed: list[str] = []
    gate = asyncio.Semaphore(PARALLEL_READS)

    async def one(client: Any, checkpoint: Checkpoint) -> None:
        async with gate:
            try:
                bounds = await checkpointresets.bounds_of(
                    client, address, checkpoint.partition, hint=hint
                )
            except errors.EventHubBalancerError as e:
                failed.append(str(e))
                return
        count = events_waiting(bounds, checkpoint.sequence_number)
        if count is None:
            past_end[checkpoint.partition] = bounds.last_sequence_number
        else:
            counts[checkpoint.partition] = count

    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            async with checkpointresets.hub_client(address) as client:
                await asyncio.gather(*(one(client, c) for c in checkpoints))
    except TimeoutError:
        return Waiting(
            counts,
            past_end=past_end,
            problem=f"Event Hub {address.eventhub_name!r} in {address.fully_qualified_namespace} "
            f"said where {len(counts) + len(past_end)} of {len(checkpoints)} partitions end "
            f"within {READ_TIMEOUT_S:g} s",
        )
    except errors.EventHubBalancerError as e:
        return Waiting(counts, problem=str(e), past_end=past_end)
    return Waiting(counts, problem=failed[0] if failed else None, past_end=past_end)


def events_waiting(bounds: startpositions.PartitionBounds, sequence_number: int) -> int | None:
    """The events a partition holds past a checkpoint at ``sequence_number``; None when the
    checkpoint is past the partition's last event (the hub created again under its name):
    counted, it would read 0, as if caught up, while none of the partition's events is."""
    if sequence_number > bounds.last_sequence_number:
        return None
    return bounds.waiting_after(sequence_number)


def warnings(
    waiting: Waiting, checkpoints: Sequence[Checkpoint], *, managed: bool = True
) -> list[str]:
    """The lines on stderr: the partitions whose count is not known and why, and those whose
    checkpoint is past their end, each with what follows: for an EventHubConsumer's
    (``managed``) what its next owner does; for a group listed by flags, whose readers are
    not ours, what the checkpoint makes a reader miss."""
    said = []
    missing = [
        c.partition
        for c in checkpoints
        if c.partition not in waiting.counts and c.partition not in waiting.past_end
    ]
    if missing:
        said.append(
            f"ehb: warning: the events waiting after the checkpoints of {_partitions(missing)} "
            f"are not known: {waiting.problem or 'Event Hubs did not say where they end'}"
        )
    for checkpoint in checkpoints:
        if (last := waiting.past_end.get(checkpoint.partition)) is not None:
            end = f"last event ({last})" if last >= 0 else "end (it holds no event)"
            follows = (
                "the next owner to take it up starts it again from spec.startPosition (reset "
                "it now with `ehb checkpoints reset`)"
                if managed
                else "a reader that starts from it misses the partition's events up to it"
            )
            said.append(
                f"ehb: warning: partition {checkpoint.partition}: checkpoint at sequence number "
                f"{checkpoint.sequence_number} is past the partition's {end}: the "
                f"Event Hub was created again under its name, or the blob was edited; {follows}"
            )
    return said


def _partitions(ids: Sequence[str]) -> str:
    return ("partition " if len(ids) == 1 else "partitions ") + ", ".join(ids)
