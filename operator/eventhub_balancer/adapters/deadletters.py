"""Dead letters: the batches a handler failed on ``spec.processing.maxAttempts`` times.

With ``onFailure: deadLetter`` a consumer pod writes such a batch, whole, as one JSON blob in
the checkpoint container, beside the checkpoints and named after the batch:
``<namespace>/<hub>/<consumer group>/deadletter/<partition>/<first>-<last>.json`` (lower-cased
as the checkpoint blobs are, ``contracts.checkpointblobs``). Only once the blob is durable
does the checkpoint pass the batch, so a batch is never both skipped and missing: the worker
retries a failed write (``consumer.partitions``). The same batch always gets the same name,
so a write repeated by the next owner replaces the blob rather than adding a copy. A pod
whose epoch the checkpoint blob has superseded writes none: the batch is the new owner's.

The blob carries what is needed to replay or inspect the batch without Event Hubs: each event
with its partition, sequence number, offset, enqueued time, partition key, properties and body
(UTF-8 text when it decodes, else base64), and the error, the attempts, the pod and the epoch.

The read side, which serves ``ehb deadletters``, is `deadletterreplays`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypedDict

from azure.core import exceptions as azure_errors
from azure.storage.blob import ContentSettings
from azure.storage.blob.aio import ContainerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, retrying
from eventhub_balancer.contracts import checkpointblobs, partitionreports

#: The folder beside ``checkpoint/`` and ``ownership/``.
KIND: Final = "deadletter"
#: One write of a batch (up to a few MB) may take this long before it counts as failed.
WRITE_TIMEOUT_S: Final = 30.0


class DeadEventBody(TypedDict):
    partition: str
    sequenceNumber: int
    offset: str
    enqueuedTime: str
    partitionKey: str | None
    properties: dict[str, Any]
    #: "utf-8" when the body is text, else "base64".
    bodyEncoding: str
    body: str


class DeadLetterBody(TypedDict):
    partition: str
    firstSequenceNumber: int
    lastSequenceNumber: int
    error: str
    attempts: int
    pod: str
    epoch: int
    deadLetteredTime: str
    events: list[DeadEventBody]


def blob_name(
    *,
    fully_qualified_namespace: str,
    eventhub_name: str,
    consumer_group: str,
    partition: str,
    first_sequence_number: int,
    last_sequence_number: int,
) -> str:
    """The blob of one dead-lettered batch."""
    prefix = checkpointblobs.blob_prefix(
        fully_qualified_namespace=fully_qualified_namespace,
        eventhub_name=eventhub_name,
        consumer_group=consumer_group,
        kind=KIND,
    )
    return f"{prefix}{partition}/{first_sequence_number}-{last_sequence_number}.json".lower()


def _jsonable(value: object) -> object:
    """Event properties may hold bytes, times or AMQP types: keep them readable."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return str(value)


def _properties(properties: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(_jsonable(k) if not isinstance(k, str) else k): v for k, v in properties.items()}


def _event(event: deliveries.ReceivedEvent) -> DeadEventBody:
    try:
        body, encoding = event.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(event.body).decode("ascii"), "base64"
    return {
        "partition": event.partition,
        "sequenceNumber": event.sequence_number,
        "offset": event.offset,
        "enqueuedTime": event.enqueued_time.isoformat(),
        "partitionKey": event.partition_key,
        "properties": _properties(event.properties),
        "bodyEncoding": encoding,
        "body": body,
    }


def build(
    events: Sequence[deliveries.ReceivedEvent],
    *,
    error: str,
    attempts: int,
    pod: str,
    epoch: int,
    now: datetime.datetime,
) -> DeadLetterBody:
    """The blob's content for a batch (at least one event)."""
    if not events:
        raise ValueError("a dead letter needs at least one event")
    return {
        "partition": events[0].partition,
        "firstSequenceNumber": events[0].sequence_number,
        "lastSequenceNumber": events[-1].sequence_number,
        "error": error,
        "attempts": attempts,
        "pod": pod,
        "epoch": epoch,
        "deadLetteredTime": now.astimezone(datetime.UTC).isoformat(),
        "events": [_event(e) for e in events],
    }


def encode(body: DeadLetterBody) -> bytes:
    return json.dumps(body, default=_jsonable, ensure_ascii=False, indent=1).encode("utf-8")


class DeadLetterWriter:
    """Writes dead letters into the checkpoint container of one hub and consumer group.

    One attempt per `write`: the caller retries (it must not move the checkpoint before a
    write succeeded, and it knows when to give up: on release).
    """

    def __init__(
        self,
        container: ContainerClient,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        consumer_group: str,
        write_timeout: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.container = container
        self.fully_qualified_namespace = fully_qualified_namespace
        self.eventhub_name = eventhub_name
        self.consumer_group = consumer_group
        self.write_timeout = write_timeout

    def name_of(self, events: Sequence[deliveries.ReceivedEvent]) -> str:
        return blob_name(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
            partition=events[0].partition,
            first_sequence_number=events[0].sequence_number,
            last_sequence_number=events[-1].sequence_number,
        )

    async def write(
        self,
        events: Sequence[deliveries.ReceivedEvent],
        *,
        error: str,
        attempts: int,
        pod: str,
        epoch: int,
    ) -> str:
        """Store the batch; returns the blob's name once it is durable.

        `errors.OwnershipLost` (nothing written) when the partition's checkpoint blob holds
        a higher epoch than ``epoch``; `errors.ConfigurationError` when the credentials are
        refused or forbidden (the container's permissions must allow writes; the message says
        what to grant),
        `errors.CheckpointStoreUnreachable` otherwise.
        """
        name = self.name_of(events)
        partition = events[0].partition
        data = encode(
            build(
                events,
                error=error,
                attempts=attempts,
                pod=pod,
                epoch=epoch,
                now=datetime.datetime.now(datetime.UTC),
            )
        )
        try:
            async with asyncio.timeout(self.write_timeout):
                await self._refuse_if_superseded(partition, epoch)
                await self.container.upload_blob(
                    name,
                    data,
                    overwrite=True,
                    content_settings=ContentSettings(content_type="application/json"),
                )
        except azure_errors.ClientAuthenticationError as e:
            raise errors.ConfigurationError(
                f"dead-letter write of {name}: credentials rejected (the pod's identity needs "
                "write access to the checkpoint container)"
            ) from e
        except TimeoutError as e:
            raise errors.CheckpointStoreUnreachable(
                f"dead-letter write of {name}: no answer within {self.write_timeout:g} s"
            ) from e
        except (azure_errors.AzureError, OSError) as e:
            status = getattr(e, "status_code", None)
            if status == 403:  # refused at every attempt until someone grants what is missing
                what = retrying.FORBIDDEN.get(
                    retrying.error_code(e) or "", retrying.FORBIDDEN_OTHERWISE
                )
                raise errors.ConfigurationError(
                    f"dead-letter write of {name}: the blob service forbids it "
                    f"({retrying.describe(e)}): {what}"
                ) from e
            raise errors.CheckpointStoreUnreachable(
                f"dead-letter write of {name}: "
                f"{f'HTTP {status} ' if status else ''}{type(e).__name__}"
            ) from e
        return name

    async def _refuse_if_superseded(self, partition: str, epoch: int) -> None:
        """`errors.OwnershipLost` when the partition's checkpoint blob holds a higher epoch.

        A pod whose partition moved on (its link stolen while its handler was still retrying)
        would otherwise dead-letter a batch that the new owner processes itself: listed as
        failed, and processed twice once replayed. A blob that is missing or unreadable
        proves no other owner: the checkpoint write after the dead letter deals with it.
        """
        name = checkpointblobs.blob_name(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
            partition=partition,
        )
        try:
            properties = await self.container.get_blob_client(name).get_blob_properties()
        except azure_errors.ResourceNotFoundError:
            return
        try:
            stored = checkpointblobs.decode_metadata(properties.metadata or {})
        except errors.InvalidInput:
            return
        if stored.epoch > epoch:
            raise errors.OwnershipLost(partition, epoch, stored.epoch, stored.owner_id)


# --- the read side: ``ehb deadletters`` ---


def decode_events(body: DeadLetterBody) -> list[deliveries.ReceivedEvent]:
    """The batch's events as a handler received them (bodies back to bytes).

    Property values come back as the blob holds them: bytes that were text are text now, and
    other bytes are base64 text (the blob does not say which), as in `_jsonable`.
    """
    events: list[deliveries.ReceivedEvent] = []
    for n, e in enumerate(body.get("events") or []):
        try:
            raw = (
                base64.b64decode(e["body"], validate=True)
                if e["bodyEncoding"] == "base64"
                else e["body"].encode("utf-8")
            )
            enqueued = datetime.datetime.fromisoformat(e["enqueuedTime"])
            events.append(
                deliveries.ReceivedEvent(
                    partition=str(e["partition"]),
                    sequence_number=int(e["sequenceNumber"]),
                    offset=str(e["offset"]),
                    enqueued_time=enqueued,
                    partition_key=e.get("partitionKey"),
                    properties=dict(e.get("properties") or {}),
                    body=raw,
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise errors.ConfigurationError(
                f"event {n} of the dead letter is unreadable ({type(error).__name__}: {error}): "
                "the blob was changed by hand or by another tool; fix or delete it"
            ) from error
    return events


def first_line(text: str) -> str:
    """An error's first line, as a partition report shows it: what a table has room for,
    naming the cause a traceback in the message ends with (`partitionreports.first_line`)."""
    return partitionreports.first_line(text)
