"""Dead letters read back: what ``ehb deadletters`` lists, shows, replays and deletes.

`DeadLetterReader` lists, reads, marks and deletes the blobs `deadletters` wrote, and
`replay_to_hub` sends a batch back into its Event Hub. A replay is recorded in the blob's
metadata (`REPLAYED_TIME`, `REPLAYED_TO`), not in its content, so the batch stays exactly as
it was written and a second replay is a deliberate act (``--force``): Event Hubs has no
idempotent send, so each replay adds the events again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from azure.core import exceptions as azure_errors
from azure.eventhub import EventData
from azure.storage.blob.aio import ContainerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, eventhubs
from eventhub_balancer.adapters.deadletters import KIND, DeadLetterBody, first_line
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, checkpointblobs

#: One read, listing, metadata change or delete: the command fails rather than hangs.
READ_TIMEOUT_S: Final = 30.0
#: Sending one dead letter's events back into the hub (a few batches at most).
SEND_TIMEOUT_S: Final = 60.0
#: Blob metadata of a replayed dead letter: when, and where to (``hub`` or ``handler:<ref>``).
REPLAYED_TIME: Final = "replayed_time"
REPLAYED_TO: Final = "replayed_to"
#: The application property a replayed event carries: the dead letter it came from, so that
#: consumers (and people reading the hub) can tell a replay from the original.
REPLAY_PROPERTY: Final = "ehb-replay-of"
#: A dead letter's name below the prefix: ``<partition>/<first>-<last>.json``.
_RELATIVE_NAME: Final = re.compile(r"(?P<partition>[^/]+)/(?P<first>\d+)-(?P<last>\d+)\.json")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """One dead-lettered batch: what ``ehb deadletters list`` shows of it."""

    name: str
    #: Below the hub's dead-letter folder, without ``.json``: ``<partition>/<first>-<last>``
    short_name: str
    partition: str
    first_sequence_number: int
    last_sequence_number: int
    events: int
    error: str
    attempts: int
    pod: str
    epoch: int
    dead_lettered_time: str
    replayed_time: str | None
    replayed_to: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeadLetterListing:
    """What ``ehb deadletters list`` found: the dead letters, and one message per blob in
    their folder that a consumer pod did not write so (each names its blob)."""

    letters: list[DeadLetter]
    malformed: list[str]


#: Said of a blob in the dead-letter folder that a consumer pod did not write as it is.
_NOT_WRITTEN_BY_A_POD: Final = (
    "it was not written by a consumer pod; delete it or move it out of the deadletter folder"
)


def _decoded(name: str, data: bytes) -> DeadLetterBody:
    """A dead letter's content, checked for what `summary` and ``show`` read."""
    try:
        body = bounds.loads(data.decode("utf-8"))
    except ValueError as e:  # not UTF-8, not JSON, or nested past the decoder
        raise errors.ConfigurationError(
            f"dead letter {name} is not JSON: {_NOT_WRITTEN_BY_A_POD}"
        ) from e
    events = body.get("events") if isinstance(body, dict) else None
    if not isinstance(events, list):
        raise errors.ConfigurationError(
            f"dead letter {name} has no events list: {_NOT_WRITTEN_BY_A_POD}"
        )
    if not all(isinstance(e, dict) for e in events):
        raise errors.ConfigurationError(
            f"dead letter {name} has an event that is not an object: {_NOT_WRITTEN_BY_A_POD}"
        )
    return body  # type: ignore[no-any-return]


def _integer(name: str, body: DeadLetterBody, field: str, default: int) -> int:
    value = body.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int):
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise errors.ConfigurationError(
            f"dead letter {name}: {field} is {shown}, not an integer: {_NOT_WRITTEN_BY_A_POD}"
        )
    return value


def _wrap_store_error(what: str, e: BaseException, timeout: float) -> errors.EventHubBalancerError:
    if isinstance(e, azure_errors.ResourceNotFoundError):
        return errors.NotFound(f"{what}: no such blob (list them with `ehb deadletters list`)")
    if isinstance(e, azure_errors.ClientAuthenticationError):
        return errors.ConfigurationError(
            f"{what}: credentials rejected (they need read access to the checkpoint container, "
            "and write access to mark or delete a dead letter)"
        )
    if isinstance(e, TimeoutError):
        return errors.CheckpointStoreUnreachable(f"{what}: no answer within {timeout:g} s")
    status = getattr(e, "status_code", None)
    return errors.CheckpointStoreUnreachable(
        f"{what}: {f'HTTP {status} ' if status else ''}{type(e).__name__}"
    )


class DeadLetterReader:
    """Reads, marks and deletes the dead letters of one hub and consumer group."""

    def __init__(
        self,
        container: ContainerClient,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        consumer_group: str,
        timeout: float = READ_TIMEOUT_S,
    ) -> None:
        self.container = container
        self.prefix = checkpointblobs.blob_prefix(
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=eventhub_name,
            consumer_group=consumer_group,
            kind=KIND,
        )
        self.timeout = timeout

    def resolve(self, blob: str) -> str:
        """The full blob name of what a user typed: a full name, or ``0/5-6`` (as listed)."""
        relative = blob.strip().lower()
        if relative.startswith(self.prefix):
            relative = relative[len(self.prefix) :]
        if not relative.endswith(".json"):
            relative += ".json"
        if not _RELATIVE_NAME.fullmatch(relative):
            raise errors.InvalidInput(
                "BLOB",
                f"{blob!r} names no dead letter of this consumer: give a name as "
                f"`ehb deadletters list` prints it, e.g. 0/5-6, or in full under {self.prefix}",
            )
        return self.prefix + relative

    def short_name(self, name: str) -> str:
        return name[len(self.prefix) :].removesuffix(".json")

    async def names(self, *, partition: str | None = None) -> list[tuple[str, dict[str, str]]]:
        """(name, metadata) of each dead letter, by partition and then sequence number."""
        start = self.prefix + (f"{partition.lower()}/" if partition is not None else "")
        found: list[tuple[str, dict[str, str]]] = []
        try:
            async with asyncio.timeout(self.timeout):
                async for item in self.container.list_blobs(
                    name_starts_with=start, include=["metadata"]
                ):
                    relative = str(item.name)[len(self.prefix) :]
                    if _RELATIVE_NAME.fullmatch(relative):
                        found.append((str(item.name), dict(item.metadata or {})))
        except (azure_errors.AzureError, OSError, TimeoutError) as e:
            raise _wrap_store_error(f"listing {start}", e, self.timeout) from e

        def order(entry: tuple[str, dict[str, str]]) -> tuple[models.NameKey, int]:
            match = _RELATIVE_NAME.fullmatch(entry[0][len(self.prefix) :])
            assert match is not None
            return models.name_key(match["partition"]), int(match["first"])

        return sorted(found, key=order)

    async def read(self, name: str) -> tuple[DeadLetterBody, dict[str, str]]:
        """The blob's content and metadata; `errors.NotFound` when it is gone, and
        `errors.ConfigurationError` naming the blob when a pod did not write it so."""
        data, metadata = await self._download(name)
        return _decoded(name, data), metadata

    async def _download(self, name: str) -> tuple[bytes, dict[str, str]]:
        try:
            async with asyncio.timeout(self.timeout):
                downloader = await self.container.download_blob(name)
                data = await downloader.readall()
                metadata = dict(downloader.properties.metadata or {})
        except (azure_errors.AzureError, OSError, TimeoutError) as e:
            raise _wrap_store_error(f"dead letter {name}", e, self.timeout) from e
        return bytes(data), metadata

    def summary(self, name: str, body: DeadLetterBody, metadata: Mapping[str, str]) -> DeadLetter:
        """What ``list`` shows of a dead letter; a field of the wrong type is an error naming
        the blob (`read` checked only its shape)."""
        return DeadLetter(
            name=name,
            short_name=self.short_name(name),
            partition=str(body.get("partition", "")),
            first_sequence_number=_integer(name, body, "firstSequenceNumber", -1),
            last_sequence_number=_integer(name, body, "lastSequenceNumber", -1),
            events=len(body.get("events") or []),
            error=str(body.get("error", "")),
            attempts=_integer(name, body, "attempts", 0),
            pod=str(body.get("pod", "")),
            epoch=_integer(name, body, "epoch", 0),
            dead_lettered_time=str(body.get("deadLetteredTime", "")),
            replayed_time=metadata.get(REPLAYED_TIME),
            replayed_to=metadata.get(REPLAYED_TO),
        )

    async def list(self, *, partition: str | None = None) -> DeadLetterListing:
        """Every dead letter (or one partition's), read whole: they are few by design. A blob
        a pod did not write so is reported and skipped: one such blob must not hide the rest."""
        letters = []
        malformed = []
        for name, _ in await self.names(partition=partition):
            try:
                data, metadata = await self._download(name)
            except errors.NotFound:
                continue  # deleted between the listing and the read
            try:
                letters.append(self.summary(name, _decoded(name, data), metadata))
            except errors.ConfigurationError as e:
                malformed.append(str(e))
        return DeadLetterListing(letters=letters, malformed=malformed)

    async def mark_replayed(self, name: str, *, to: str, now: datetime.datetime) -> None:
        """Record a replay in the blob's metadata (its content stays as written)."""
        metadata = {REPLAYED_TIME: now.astimezone(datetime.UTC).isoformat(), REPLAYED_TO: to}
        try:
            async with asyncio.timeout(self.timeout):
                await self.container.get_blob_client(name).set_blob_metadata(metadata)
        except (azure_errors.AzureError, OSError, TimeoutError) as e:
            raise _wrap_store_error(f"marking dead letter {name}", e, self.timeout) from e

    async def delete(self, name: str) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self.container.delete_blob(name)
        except (azure_errors.AzureError, OSError, TimeoutError) as e:
            raise _wrap_store_error(f"deleting dead letter {name}", e, self.timeout) from e


def event_data(event: deliveries.ReceivedEvent, *, replay_of: str) -> EventData:
    """The event to send again: same body and properties, plus where the replay came from."""
    data = EventData(event.body)
    properties: dict[str | bytes, Any] = {k: v for k, v in event.properties.items()}
    properties[REPLAY_PROPERTY] = replay_of
    data.properties = properties
    return data


def send_groups(
    events: Sequence[deliveries.ReceivedEvent],
) -> list[tuple[dict[str, str], list[deliveries.ReceivedEvent]]]:
    """Runs of events that go into one batch, in order: by partition key when an event had
    one (Event Hubs hashes it to the same partition again), else to the partition it came
    from, so that a replay keeps the batch's order within its partition."""
    groups = []
    for (key, partition), run in itertools.groupby(
        events, key=lambda e: (e.partition_key, e.partition)
    ):
        target = {"partition_key": key} if key is not None else {"partition_id": partition}
        groups.append((target, list(run)))
    return groups


async def replay_to_hub(
    coordinates: eventhubs.Coordinates,
    events: Sequence[deliveries.ReceivedEvent],
    *,
    replay_of: str,
    limit_seconds: float = SEND_TIMEOUT_S,
) -> int:
    """Send the events back into their hub; returns how many were sent.

    Each event goes out once per call: a failure part-way may have sent some (Event Hubs
    has no idempotent send), and the caller leaves the dead letter unmarked so that the
    user sees it was not replayed whole.
    """
    where = f"Event Hub {coordinates.eventhub_name!r} in {coordinates.fully_qualified_namespace}"
    sent = 0
    try:
        async with asyncio.timeout(limit_seconds), eventhubs.producer(coordinates) as producer:
            for target, run in send_groups(events):
                batch = await producer.create_batch(**target)  # type: ignore[arg-type]
                for event in run:
                    data = event_data(event, replay_of=replay_of)
                    try:
                        batch.add(data)
                    except ValueError:  # the batch is full: send it, start the next
                        if len(batch) == 0:
                            raise errors.ConfigurationError(
                                f"{where}: event {event.sequence_number} of {replay_of} is larger "
                                "than the hub accepts in one batch; replay it through a handler"
                            ) from None
                        await producer.send_batch(batch)
                        sent += len(batch)
                        batch = await producer.create_batch(**target)  # type: ignore[arg-type]
                        batch.add(data)
                if len(batch):
                    await producer.send_batch(batch)
                    sent += len(batch)
    except errors.EventHubBalancerError:
        raise
    except TimeoutError as e:
        raise errors.EventHubUnreachable(
            f"{where}: the replay of {replay_of} took longer than {limit_seconds:g} s "
            f"({sent} of {len(events)} events sent)"
        ) from e
    except Exception as e:
        text = str(e).lower()
        if "unauthorized" in text or type(e).__name__ == "AuthenticationError":
            raise errors.EventHubAuthenticationFailed(
                f"{where}: the credentials were rejected; a replay sends, so the connection "
                "string needs Send rights (or the identity the Azure Event Hubs Data Sender role)"
            ) from e
        raise errors.EventHubUnreachable(
            f"{where}: the replay of {replay_of} failed after {sent} of {len(events)} events "
            f"({type(e).__name__}: {first_line(str(e))[:300]})"
        ) from e
    return sent
