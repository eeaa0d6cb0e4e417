"""Dead letters read back: what ``ehb deadletters`` lists, shows, replays and deletes.

`DeadLetterReader` lists, reads, marks and deletes the blobs `deadletters` wrote;
`deadlettersends.replay_to_hub` sends a batch back into its Event Hub. A replay is recorded
in the blob's metadata (`REPLAYED_TIME`, `REPLAYED_TO`), not in its content, so the batch
stays exactly as it was written and a second replay is a deliberate act (``--force``): Event
Hubs has no idempotent send, so each replay adds the events again.

Before its events go anywhere, a replay claims the blob (`REPLAYING_SINCE`, written on the
ETag it read), and its mark or delete is conditional on that claim: of two runs replaying
the same dead letter at once only one claims it, and a run killed mid-replay leaves a claim
that the next run shows rather than replaying the batch again unasked.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, TypeVar

from azure.core import MatchConditions
from azure.core import exceptions as azure_errors
from azure.storage.blob.aio import ContainerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import retrying
from eventhub_balancer.adapters.deadletters import KIND, DeadLetterBody
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, checkpointblobs

#: One read, listing, metadata change or delete, its retries included: the command fails
#: rather than hangs. A throttled account's refusals (503 ServerBusy, 500 OperationTimedOut)
#: and requests without an answer are retried within it, each for a quarter of it at first.
READ_TIMEOUT_S: Final = 30.0

T = TypeVar("T")
#: Blob metadata of a replayed dead letter: when, and where to (``hub`` or ``handler:<ref>``).
REPLAYED_TIME: Final = "replayed_time"
REPLAYED_TO: Final = "replayed_to"
#: Blob metadata of a dead letter whose replay started and has not finished yet (a replay in
#: progress, or one that was killed): when it started.
REPLAYING_SINCE: Final = "replaying_since"
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
    #: A replay claimed the blob then and has not marked it since (in progress, or killed).
    replaying_since: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fetched:
    """A dead letter as read for a replay: what the claim is conditional on."""

    body: DeadLetterBody
    metadata: dict[str, str]
    etag: str


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


def _wrap_store_error(what: str, e: BaseException) -> errors.EventHubBalancerError:
    """A failure that no retry mends (a transient one is retried: `DeadLetterReader._call`)."""
    if isinstance(e, azure_errors.ResourceNotFoundError):
        return errors.NotFound(f"{what}: no such blob (list them with `ehb deadletters list`)")
    if isinstance(e, azure_errors.ClientAuthenticationError):
        return errors.ConfigurationError(
            f"{what}: credentials rejected (they need read access to the checkpoint container, "
            "and write access to mark or delete a dead letter)"
        )
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
        self.retry = retrying.RetryPolicy(
            budget_seconds=timeout, attempt_timeout_seconds=timeout / 4
        )
        self._rng = random.Random()

    async def _call(self, what: str, request: Callable[[retrying.Budget], Awaitable[T]]) -> T:
        """``request(budget)``, sent again after each transient failure within the budget;
        what is not transient raised as `_wrap_store_error` says."""
        budget = retrying.Budget(policy=self.retry, rng=self._rng, operation=what)

        async def once() -> T:
            try:
                return await request(budget)
            except azure_errors.AzureError as e:
                if retrying.is_transient(e):
                    raise
                raise _wrap_store_error(what, e) from e

        return await retrying.call_with_retries(budget, once)

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

        async def listing(_: retrying.Budget) -> list[tuple[str, dict[str, str]]]:
            found = []
            async for item in self.container.list_blobs(
                name_starts_with=start, include=["metadata"]
            ):
                relative = str(item.name)[len(self.prefix) :]
                if _RELATIVE_NAME.fullmatch(relative):
                    found.append((str(item.name), dict(item.metadata or {})))
            return found

        found = await self._call(f"listing {start}", listing)

        def order(entry: tuple[str, dict[str, str]]) -> tuple[models.NameKey, int]:
            match = _RELATIVE_NAME.fullmatch(entry[0][len(self.prefix) :])
            assert match is not None
            return models.name_key(match["partition"]), int(match["first"])

        return sorted(found, key=order)

    async def read(self, name: str) -> tuple[DeadLetterBody, dict[str, str]]:
        """The blob's content and metadata; `errors.NotFound` when it is gone, and
        `errors.ConfigurationError` naming the blob when a pod did not write it so."""
        fetched = await self.fetch(name)
        return fetched.body, fetched.metadata

    async def fetch(self, name: str) -> Fetched:
        """As `read`, with the ETag a `claim` is conditional on."""
        data, metadata, etag = await self._download(name)
        return Fetched(body=_decoded(name, data), metadata=metadata, etag=etag)

    async def _download(self, name: str) -> tuple[bytes, dict[str, str], str]:
        async def download(_: retrying.Budget) -> tuple[bytes, dict[str, str], str]:
            downloader = await self.container.download_blob(name)
            data = await downloader.readall()
            metadata = dict(downloader.properties.metadata or {})
            return bytes(data), metadata, str(downloader.properties.etag or "")

        return await self._call(f"dead letter {name}", download)

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
            replaying_since=metadata.get(REPLAYING_SINCE),
        )

    async def list(self, *, partition: str | None = None) -> DeadLetterListing:
        """Every dead letter (or one partition's), read whole: they are few by design. A blob
        a pod did not write so is reported and skipped: one such blob must not hide the rest."""
        letters = []
        malformed = []
        for name, _ in await self.names(partition=partition):
            try:
                data, metadata, _ = await self._download(name)
            except errors.NotFound:
                continue  # deleted between the listing and the read
            try:
                letters.append(self.summary(name, _decoded(name, data), metadata))
            except errors.ConfigurationError as e:
                malformed.append(str(e))
        return DeadLetterListing(letters=letters, malformed=malformed)

    async def claim(self, name: str, fetched: Fetched, *, now: datetime.datetime) -> str | None:
        """Mark the blob as being replayed, on the ETag ``fetched`` was read with; returns
        the claim's ETag, or None when the blob changed or went since (another replay claimed,
        marked or deleted it, or its pod wrote the batch again)."""
        metadata = {**fetched.metadata, REPLAYING_SINCE: _timestamp(now)}
        return await self._set_metadata(name, metadata, etag=fetched.etag, what="claiming")

    async def release(self, name: str, fetched: Fetched, *, etag: str) -> None:
        """Undo a `claim` whose replay failed (the blob's metadata as it was read)."""
        await self._set_metadata(name, dict(fetched.metadata), etag=etag, what="releasing")

    async def mark_replayed(
        self, name: str, *, to: str, now: datetime.datetime, etag: str | None = None
    ) -> bool:
        """Record a replay in the blob's metadata (its content stays as written); with
        ``etag`` (a claim's) only on that version: False when the blob changed since."""
        metadata = {REPLAYED_TIME: _timestamp(now), REPLAYED_TO: to}
        return await self._set_metadata(name, metadata, etag=etag, what="marking") is not None

    async def _set_metadata(
        self, name: str, metadata: dict[str, str], *, etag: str | None, what: str
    ) -> str | None:
        """The blob's ETag once ``metadata`` is set (on ``etag`` when given); None when the
        blob changed or went since. A retry refused because an attempt without an answer
        had landed finds our metadata on the blob: that is the answer."""

        blob = self.container.get_blob_client(name)
        unanswered = False  # refused after an attempt that got no answer: it may have landed

        async def set_metadata(budget: retrying.Budget) -> str | None:
            nonlocal unanswered
            try:
                if etag is None:
                    answer = await blob.set_blob_metadata(metadata)
                else:
                    answer = await blob.set_blob_metadata(
                        metadata, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
            except (azure_errors.ResourceModifiedError, azure_errors.ResourceNotFoundError):
                if etag is None:
                    raise
                unanswered = budget.failures > 0
                return None  # changed or deleted since it was read
            return str((answer or {}).get("etag") or etag or "")

        async def ours(_: retrying.Budget) -> str | None:
            try:
                properties = await blob.get_blob_properties()
            except azure_errors.ResourceNotFoundError:
                return None
            return str(properties.etag) if dict(properties.metadata or {}) == metadata else None

        written = await self._call(f"{what} dead letter {name}", set_metadata)
        if written is None and unanswered:
            return await self._call(f"{what} dead letter {name} (reading it back)", ours)
        return written

    async def delete(self, name: str, *, etag: str | None = None) -> bool:
        """Delete the blob; with ``etag`` (a claim's) only that version: False when it
        changed since (its pod wrote the batch again: that dead letter stays). Gone at a
        retry after an attempt without an answer, it counts as deleted."""

        async def delete(budget: retrying.Budget) -> bool:
            try:
                if etag is None:
                    await self.container.delete_blob(name)
                else:
                    await self.container.delete_blob(
                        name, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
            except azure_errors.ResourceNotFoundError:
                if budget.failures > 0:
                    return True  # our attempt without an answer deleted it
                if etag is None:
                    raise
                return False  # deleted since the claim
            except azure_errors.ResourceModifiedError:
                if etag is None:
                    raise
                return False  # changed since the claim
            return True

        return await self._call(f"deleting dead letter {name}", delete)


def _timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).isoformat()
