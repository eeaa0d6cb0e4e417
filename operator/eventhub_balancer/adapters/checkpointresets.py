"""Moving a paused consumer group's checkpoints on purpose: reset and import.

Replaying a day of events, skipping a poison backlog or moving a consumer group to another
hub all come down to writing chosen positions into the checkpoint blobs. Two things make that
safe here, as Kafka's ``--reset-offsets`` makes it safe there: it is only done while the
consumer is paused (the CLI checks the CR; no pod then holds a partition), and every blob is
written with an epoch above every owner's, the blob's and the CR's ``status.epochs``, so a
stale owner that wakes up is fenced out (its If-Match write fails, its re-read finds the higher
epoch) instead of moving the checkpoint back. When the consumer resumes, the operator reads
the blobs' epochs as floors and gives out epochs above ours; the new owner's fence keeps the
blob's position, the one written here.

The positions follow the checkpoint semantics of ``contracts.checkpointblobs``: a sequence
number is the *last processed* event, so "replay from event N" stores ``N - 1``. Positions
outside what the partition retains are clamped to its bounds, as Kafka clamps offsets.
The pure `new_position` says what a target means; the reads (partition bounds, the first
event at a time) and writes below go through ``receiving`` and ``checkpointrequests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import random
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointrequests, partitionbounds, receiving, retrying
from eventhub_balancer.contracts import bounds, checkpointblobs, connectionstrings, startpositions

logger = logging.getLogger(__name__)

#: The owner id written with a reset; ``ehb checkpoints list`` shows who moved the blob last.
RESET_OWNER: Final = "ehb-checkpoints-reset"
#: How long a datetime target may wait for the first event at or after its time, which the
#: partition's properties said exists; past it the reset fails (EventHubUnreachable), never
#: moving the partition to its end on a silence.
FIRST_EVENT_WAIT_S: Final = partitionbounds.FIRST_EVENT_TIMEOUT_S
#: How many partitions are read at once: enough to hide round trips, few enough not to open
#: dozens of links at a time on a hub with many partitions.
PARALLEL_READS: Final = 8
#: What a hub that cannot be read says to check (``ehb checkpoints list`` without NAME: flags).
SPEC_HINT: Final = "check spec.eventHub and its credentials"

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


@dataclasses.dataclass(frozen=True)
class ToEarliest:
    """Replay everything the partition retains."""


@dataclasses.dataclass(frozen=True)
class ToLatest:
    """Skip everything enqueued so far."""


@dataclasses.dataclass(frozen=True)
class ToDatetime:
    """Resume at the first event enqueued at or after ``when``."""

    when: datetime.datetime


@dataclasses.dataclass(frozen=True)
class ShiftBy:
    """Move the stored sequence number by ``delta`` (negative: replay that many events)."""

    delta: int


@dataclasses.dataclass(frozen=True)
class ToSequence:
    """Resume at sequence number ``sequence_number``: it is the next event processed."""

    sequence_number: int


Target = ToEarliest | ToLatest | ToDatetime | ShiftBy | ToSequence


def describe(target: Target) -> str:
    """The target as the CLI flag that chose it, for tables and the CR's Event."""
    match target:
        case ToEarliest():
            return "--to-earliest"
        case ToLatest():
            return "--to-latest"
        case ToDatetime(when=when):
            return f"--to-datetime {when.astimezone(datetime.UTC).isoformat()}"
        case ShiftBy(delta=delta):
            return f"--shift-by {delta}"
        case ToSequence(sequence_number=number):
            return f"--to-sequence {number}"


def parse_duration(text: str, *, field: str = "--by-duration") -> datetime.timedelta:
    """``90s``, ``15m``, ``2h``, ``1d``, or combined (``1h30m``): how far back from now."""
    match = _DURATION.match(text.strip()) if text.strip() else None
    if match is None or not any(match.groups()):
        raise errors.InvalidInput(
            field, f"{text!r} is not a duration: use e.g. 90s, 15m, 2h, 1d or 1h30m"
        )
    try:
        days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
        return datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except (OverflowError, ValueError):  # past timedelta's 999,999,999 days; or 4,300 digits
        raise errors.InvalidInput(field, _too_long(text)) from None


def time_before(
    now: datetime.datetime, text: str, *, field: str = "--by-duration"
) -> datetime.datetime:
    """``now`` less the duration ``text``: the time ``--by-duration`` resets to."""
    duration = parse_duration(text, field=field)
    try:
        return now - duration
    except OverflowError:
        raise errors.InvalidInput(field, _too_long(text)) from None


def _too_long(text: str) -> str:
    return (
        f"{text!r} reaches back before the year 1: give a shorter duration, or --to-earliest "
        "to replay everything the partition retains"
    )


def parse_datetime(text: str, *, field: str = "--to-datetime") -> datetime.datetime:
    """An RFC 3339 time with a zone, in UTC: guessing the zone would replay hours too many or
    few (as a start position's ``enqueuedTime`` is read)."""
    return startpositions.parse_rfc3339(text.strip(), field=field)


def clamped(stored: int, limits: startpositions.PartitionBounds) -> checkpointblobs.Position:
    """The checkpoint for "last processed = ``stored``", within what the partition retains.

    Before the first retained event is the earliest position (offset ``-1``, which the SDK
    reads as the partition's start), at or past the last event the latest (with its offset);
    in between the offset is not known, and the consumer resumes from the sequence number.
    """
    if limits.empty or stored >= limits.last_sequence_number:
        return startpositions.seed_position(startpositions.LATEST, bounds=limits)
    if stored <= limits.beginning_sequence_number - 1:
        return startpositions.seed_position(startpositions.EARLIEST, bounds=limits)
    return checkpointblobs.Position(offset=checkpointblobs.OFFSET_UNKNOWN, sequence_number=stored)


def new_position(
    target: Target,
    *,
    old: checkpointblobs.Position | None,
    limits: startpositions.PartitionBounds,
    first_at: int | None = None,
) -> checkpointblobs.Position:
    """Where ``target`` puts a partition whose checkpoint is ``old`` (None: no blob yet).

    ``first_at`` is, for a datetime target, the sequence number of the first event at or
    after its time (None: there is none, every event is older).
    """
    match target:
        case ToEarliest():
            return startpositions.seed_position(startpositions.EARLIEST, bounds=limits)
        case ToLatest():
            return startpositions.seed_position(startpositions.LATEST, bounds=limits)
        case ToDatetime():
            if first_at is None:
                return startpositions.seed_position(startpositions.LATEST, bounds=limits)
            return clamped(first_at - 1, limits)
        case ShiftBy(delta=delta):
            base = (
                old.sequence_number
                if old is not None
                else startpositions.seed_position(
                    startpositions.EARLIEST, bounds=limits
                ).sequence_number
            )
            return clamped(base + delta, limits)
        case ToSequence(sequence_number=number):
            return clamped(number - 1, limits)


def next_epoch(partition: str, *, stored: int, status_epochs: Mapping[str, Any]) -> int:
    """One above every owner's epoch: the blob's and the operator's record (``status.epochs``).

    The operator reads the blob's epoch as a floor when it assigns again, so ours must leave
    room for a successor (``bounds.MAX_FLOOR``).
    """
    recorded = status_epochs.get(partition)
    floor = max(stored, recorded if isinstance(recorded, int) and bounds.is_epoch(recorded) else 0)
    if floor >= bounds.MAX_FLOOR:
        raise errors.ConfigurationError(
            f"partition {partition}: epoch {floor} leaves no room for a higher one; "
            "reset status.epochs and the blob's epoch metadata by hand"
        )
    return floor + 1


@dataclasses.dataclass(frozen=True)
class Change:
    """One partition's checkpoint before and after (``written`` once it is written)."""

    partition: str
    old: checkpointrequests.Checkpoint | None
    new: checkpointblobs.Position
    epoch: int
    written: checkpointrequests.Checkpoint | None = None
    #: a shift (``--shift-by``) is relative to the blob it lands on: the write derives ``new``
    #: again from the blob as it finds it, within these bounds; None: ``new`` is absolute
    shift: ShiftBy | None = None
    limits: startpositions.PartitionBounds | None = None


def store_blobs(
    container: Any, *, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
) -> checkpointrequests.CheckpointBlobs:
    """The checkpoint blobs of a consumer group, written as `RESET_OWNER`."""
    return checkpointrequests.CheckpointBlobs(
        container,
        fully_qualified_namespace=fully_qualified_namespace,
        eventhub_name=eventhub_name,
        consumer_group=consumer_group,
        owner_id=RESET_OWNER,
    )


@contextlib.asynccontextmanager
async def hub_client(address: receiving.EventHubAddress) -> AsyncIterator[Any]:
    """One Event Hubs client for the partition ids and every partition's bounds: a reset
    reads them all, and a connection per partition would cost a handshake each."""
    try:
        client = receiving.make_client(address)
    except (ValueError, TypeError) as e:
        # The SDK's message does not echo the string; ours must not either.
        raise errors.ConfigurationError(
            "the Event Hubs connection string in spec.eventHub.credentials' Secret is malformed "
            f"({type(e).__name__}): write {connectionstrings.EVENTHUB_SHAPE} there"
        ) from e
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            await client.close()


def _unreachable(
    address: receiving.EventHubAddress, what: str, e: BaseException, hint: str = SPEC_HINT
) -> Exception:
    return errors.EventHubUnreachable(
        f"Event Hub {address.eventhub_name!r} in {address.fully_qualified_namespace}: cannot "
        f"read {what} ({type(e).__name__}); {hint}"
    )


async def partition_ids(client: Any, address: receiving.EventHubAddress) -> list[str]:
    """The hub's partition ids, in Event Hubs' order."""
    try:
        async with asyncio.timeout(partitionbounds.BOUNDS_TIMEOUT_S):
            ids = await client.get_partition_ids()
    except Exception as e:
        raise _unreachable(address, "its partition ids", e) from e
    return [str(i) for i in ids]


async def bounds_of(
    client: Any, address: receiving.EventHubAddress, partition: str, *, hint: str = SPEC_HINT
) -> startpositions.PartitionBounds:
    """Where a partition's retained events start and end now (``hint``: what to check)."""
    try:
        async with asyncio.timeout(partitionbounds.BOUNDS_TIMEOUT_S):
            props = await client.get_partition_properties(partition)
    except Exception as e:
        raise _unreachable(address, f"the properties of partition {partition}", e, hint) from e
    return partitionbounds.bounds_from(props)


def _budget(what: str, policy: retrying.RetryPolicy) -> retrying.Budget:
    return retrying.Budget(policy=policy, rng=random.Random(policy.seed), operation=what)


async def plan(
    blobs: checkpointrequests.CheckpointBlobs,
    client: Any,
    address: receiving.EventHubAddress,
    target: Target,
    partitions: Sequence[str],
    *,
    status_epochs: Mapping[str, Any],
    wait: float = FIRST_EVENT_WAIT_S,
    retry: retrying.RetryPolicy = retrying.DEFAULT_POLICY,
) -> list[Change]:
    """What ``target`` would write, per partition; reads only (the blobs and Event Hubs).

    ``client`` is a `hub_client`'s; a datetime target also receives one event per partition
    (without an owner level: the peek takes no partition from anyone).
    """
    # Each management call and each peek costs a round trip of its own (about 0.4 s on the
    # emulator): partitions are read side by side, a few at a time.
    gate = asyncio.Semaphore(PARALLEL_READS)

    async def one(partition: str) -> Change:
        async with gate:
            old = await blobs.get(partition, _budget(f"read checkpoint of {partition}", retry))
            limits = await bounds_of(client, address, partition)
            first_at = None
            if isinstance(target, ToDatetime) and not limits.empty:
                first_at = await partitionbounds.first_sequence_at(
                    address, partition, target.when, wait=wait
                )
        return Change(
            partition=partition,
            old=old,
            new=new_position(
                target, old=old.position if old else None, limits=limits, first_at=first_at
            ),
            epoch=next_epoch(
                partition, stored=old.epoch if old else 0, status_epochs=status_epochs
            ),
            shift=target if isinstance(target, ShiftBy) else None,
            limits=limits,
        )

    return list(await asyncio.gather(*(one(p) for p in partitions)))


async def positions_of(
    blobs: checkpointrequests.CheckpointBlobs,
    wanted: Mapping[str, checkpointblobs.Position],
    *,
    status_epochs: Mapping[str, Any],
    retry: retrying.RetryPolicy = retrying.DEFAULT_POLICY,
) -> list[Change]:
    """The changes that put each partition at a given position (an import); reads only."""
    changes = []
    for partition, position in wanted.items():
        old = await blobs.get(partition, _budget(f"read checkpoint of {partition}", retry))
        changes.append(
            Change(
                partition=partition,
                old=old,
                new=position,
                epoch=next_epoch(
                    partition, stored=old.epoch if old else 0, status_epochs=status_epochs
                ),
            )
        )
    return changes


async def write(
    blobs: checkpointrequests.CheckpointBlobs,
    change: Change,
    *,
    status_epochs: Mapping[str, Any],
    retry: retrying.RetryPolicy = retrying.DEFAULT_POLICY,
) -> Change:
    """Write one change, with an epoch above whatever the blob holds when it is written.

    Every write is conditional on the ETag just read; a blob that changed in between is read
    again and gets an epoch above its new one. A shift moves the position it finds there,
    not the one planned: two admins shifting by -100 at once replay 200 events, each one's
    result showing what it moved from (``old`` is the blob the write replaced). A lease
    still held (by a fencer that died mid-fence: the consumer is paused) is broken, as a
    fencer with a higher epoch would.
    """
    budget = _budget(f"reset checkpoint of partition {change.partition}", retry)
    while True:
        current = await blobs.get(change.partition, budget)
        new = change.new
        if change.shift is not None and change.limits is not None:
            new = new_position(
                change.shift, old=current.position if current else None, limits=change.limits
            )
        epoch = next_epoch(
            change.partition,
            stored=current.epoch if current else 0,
            status_epochs=status_epochs,
        )
        epoch = max(epoch, change.epoch)
        if current is None:
            written = await blobs.create(change.partition, new, epoch, budget)
        else:
            written = await blobs.write(change.partition, new, epoch, current.etag, budget)
            if written is None and current.leased:
                await blobs.break_lease(change.partition, current.etag, budget)
                continue
        if written is not None:
            logger.info(
                "partition %s: checkpoint reset to sequence number %d with epoch %d",
                change.partition,
                new.sequence_number,
                epoch,
            )
            return dataclasses.replace(change, old=current, new=new, epoch=epoch, written=written)
        await budget.after_conflict("412/409 (changed since read)")
