"""Receiving one partition from Event Hubs: the consumer runtime's only door to the SDK.

The consumer runtime owns a partition for one epoch at a time and must never see an SDK
type: it asks this module for micro-batches of :class:`deliveries.ReceivedEvent` and gets
:class:`errors.OwnershipLost` when a newer owner took the partition over. Choices, measured
against azure-eventhub 5.15 (see ``ehb bench consumer``):

- ``aio`` with one receive task per partition: the sync client, serving several partitions,
  hands out about one event per partition per pass and blocks about 0.2 s on each idle one,
  so a backlog drains at under one event per second per partition.
- The per-partition consumer (``EventHubConsumerClient._create_consumer`` and its
  ``receive(batch=True)``) rather than the public ``receive_batch``: the public call runs the
  SDK's own load balancer, which re-claims a partition after it was stolen (and re-reads it
  from the initial position: duplicates), and whose ``close()`` polls its tasks once a
  second. The per-partition consumer is what ``receive_batch`` runs underneath, so the
  per-event cost is the same.
- ``owner_level`` = our epoch, so that Event Hubs disconnects an older owner
  (``amqp:link:stolen``), which we translate into :class:`errors.OwnershipLost` at once; a hub
  or consumer group that does not exist (``amqp:not-found``) fails the partition at once with
  :class:`errors.EventHubNotFound`, and a position past its end with
  :class:`errors.EventHubUnreachable` (`linkrefusals`), never a loop of reopens.
- A stream that goes back (a delivery not above the last one received, or a reopen onto a
  partition that ends below it: the hub created again) ends the receiver, never a silent wait.
- Our own micro-batching on top of the SDK's buffer (``adapters.batching``): the SDK hands
  out whatever arrived, one event at a time when the stream is slow.
- After each delivery, the delivery tags the SDK's link keeps are dropped
  (`linkrepairs.forget_delivery_tags`): kept, they grow by every event for the life of the link.
- Handshakes are read back to back (`amqphandshakes`), the link's and those of the management
  calls of every client `make_client` builds: at the SDK's one frame per 50 ms, a take-up
  waited about 0.5 s for a handshake the emulator answers in 5 ms.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    amqphandshakes,
    batching,
    deliveries,
    idlereads,
    linkrefusals,
    linkrepairs,
    sdkevents,
    sharedlines,
    tlscontexts,
)

logger = logging.getLogger(__name__)

#: The SDK's own retries of a broken link (0.8 s factor); ours reopen after: each budget small.
SDK_RETRY_TOTAL = 2

#: How many times in a row we reopen a partition that keeps failing before we give up and
#: report :class:`errors.EventHubUnreachable` (the runtime then marks the partition stuck).
REOPEN_ATTEMPTS = 6

#: A link open this long before it failed was healthy: its failure starts a new run of attempts.
HEALTHY_LINK_S = 60.0

#: The backoff between reopen attempts, doubled each time up to the cap.
REOPEN_BACKOFF_S = 0.5
REOPEN_BACKOFF_MAX_S = 8.0

#: The reopens of a pod's partitions that fail together, said as one line (`sharedlines`).
REOPENS = "%d partitions fail to receive and reopen their links together, last: %s"

#: Each receive link's opening at INFO, with how long it took.
LINK_OPEN = "partition %s: receive link open with owner level %s in %.0f ms"

#: A receive link whose handshake takes longer has failed (the pump reopens it, then reports
#: the partition unreachable): the SDK itself bounds only the authentication. It bounds the
#: SDK's own reopens too (`linkrepairs.bound_opens`): under a blackhole a partition is reported
#: failing after `REOPEN_ATTEMPTS` opens of this long and their backoff.
LINK_OPEN_TIMEOUT_S = 30.0

#: The idle-time-out our receive connections advertise: one that hears no frame for this long
#: is closed, and the link reopened on a new one (the SDK's retry, then `_pump`'s). Event Hubs
#: sends an empty frame when it has had nothing to send for part of it, so a healthy idle
#: connection is kept; a hung one (a NAT gateway or firewall that silently lost the flow)
#: otherwise failed nothing, and its partition sat unprocessed until TCP gave up, if ever.
#: 60 s, the default of Azure's own Event Hubs clients in other languages: the service has
#: refused shorter idle-time-outs on its AMQP connections.
IDLE_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class EventHubAddress:
    """Which hub and consumer group, and how to authenticate (never logged)."""

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str = "$Default"
    #: A connection string; without one, ``credential``, else workload identity
    #: (DefaultAzureCredential, the pod's own).
    connection_string: str | None = dataclasses.field(default=None, repr=False)
    #: A token credential its owner closes (the admin's commands pass the identity the
    #: consumer declares, so that nothing falls back to the runner's own by omission).
    credential: Any = dataclasses.field(default=None, repr=False, compare=False)


def make_client(address: EventHubAddress) -> EventHubConsumerClient:
    """An aio consumer client (the caller closes it), its management calls quick (see above)."""
    common: dict[str, Any] = {
        "retry_total": SDK_RETRY_TOTAL,
        # Never used by the per-partition consumer; kept low in case a code path waits on it.
        "load_balancing_interval": 1.0,
        "ssl_context": tlscontexts.eventhub_context(),
        "idle_timeout": IDLE_TIMEOUT_S,
    }
    if address.connection_string:
        client = EventHubConsumerClient.from_connection_string(
            address.connection_string,
            address.consumer_group,
            eventhub_name=address.eventhub_name,
            **common,
        )
    else:
        credential = address.credential
        if credential is None:
            from azure.identity.aio import DefaultAzureCredential

            credential = DefaultAzureCredential()
        client = EventHubConsumerClient(
            address.fully_qualified_namespace,
            address.eventhub_name,
            address.consumer_group,
            credential,
            **common,
        )
    amqphandshakes.quick_management(client)
    return client


#: Kept importable from here, where they were first defined.
is_link_stolen = linkrefusals.is_link_stolen
to_event = sdkevents.to_event
last_enqueued_of = sdkevents.last_enqueued_of
EPOCH_START = sdkevents.EPOCH_START


def shared_reopens() -> sharedlines.SharedLines:
    """Reopen lines for the receivers of one pod to share: said once while many fail."""
    return sharedlines.SharedLines(logger, REOPENS)


class PartitionReceiver:
    """One partition's exclusive receive link (owner level = epoch), batched for the runtime.

    ``start()`` opens it in a background task; ``next_batch()`` hands out micro-batches and
    raises :class:`errors.OwnershipLost` (link stolen), :class:`errors.EventHubNotFound` (no
    such hub or consumer group) or :class:`errors.EventHubUnreachable` (reopening failed
    repeatedly). ``next_batch()`` may be cancelled at any time without
    losing events. ``close()`` stops receiving; buffered events are dropped (they were never
    handed out, so no checkpoint passed them).
    """

    def __init__(
        self,
        *,
        address: EventHubAddress,
        partition: str,
        epoch: int | None,
        position: deliveries.ReceivePosition,
        prefetch: int = 300,
        buffer_limit: int = 2000,
        reopens: sharedlines.SharedLines | None = None,
    ) -> None:
        self.address = address
        #: The pod's reopen lines, said once for partitions that fail together (`REOPENS`).
        self._reopens = reopens or shared_reopens()
        self.partition = partition
        self.epoch = epoch
        self._position = position
        self._prefetch = prefetch
        self._buffer = batching.EventBuffer(limit=max(buffer_limit, prefetch))
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.last_enqueued: deliveries.LastEnqueued | None = None
        #: The newest sequence number buffered: where a reopened link continues.
        self._last_buffered: int | None = None
        #: The SDK's consumer of the link now open (None between links).
        self._consumer: Any = None
        #: Its handshake answered: the link is open, until it fails or closes.
        self._linked = False

    def closing(self) -> bool:
        # A method, not the attribute: it changes while the pump awaits.
        return self._closing

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name=f"receive-{self.partition}")

    async def close(self) -> None:
        self._closing = True
        self._buffer.close()
        if self._task is not None and not await linkrepairs.cancel_until_done(
            self._task, again=lambda: self._consumer is not None
        ):
            logger.warning(
                "partition %s: the receive task did not end within %g s of its cancellation",
                self.partition,
                linkrepairs.CLOSE_TIMEOUT_S,
            )

    async def next_batch(self, *, max_size: int, max_wait: float) -> deliveries.ReceivedBatch:
        """Up to ``max_size`` events: returns when full, or ``max_wait`` after the first
        event arrived, or (empty) after ``max_wait`` with nothing at all."""
        events = await self._buffer.take(max_size=max_size, max_wait=max_wait)
        return deliveries.ReceivedBatch(
            events=events, last_enqueued=self.last_enqueued, linked=self._linked
        )

    async def _on_events(self, received: list[EventData]) -> None:
        if not received:
            return
        if self._buffer.failed:
            return
        events = [to_event(self.partition, e) for e in received]
        last = self._last_buffered
        if last is not None and events[0].sequence_number <= last:
            # Sequence numbers only grow within a partition: the link was reconnected (by the
            # SDK's own retry) to another stream under the same name, a hub created again or
            # an emulator restarted. Handed on, these events would be checkpointed below the
            # old stream's checkpoint, which never moves back. The worker starts again, and
            # its fence's check moves that checkpoint back (`consumer.connections`).
            self._fail(self._replaced(f"received sequence number {events[0].sequence_number}"))
            return
        self._last_buffered = events[-1].sequence_number
        enqueued = last_enqueued_of(received[-1])
        if enqueued is not None:
            self.last_enqueued = enqueued
        linkrepairs.forget_delivery_tags(self._consumer)
        self._buffer.add(events)
        # Backpressure: while the runtime is behind, stop taking from the SDK, whose own
        # buffer then stops crediting the link.
        await self._buffer.wait_for_room()

    async def _pump(self) -> None:
        attempts = 0
        backoff = REOPEN_BACKOFF_S
        position = self._position
        while not self._closing:
            client = make_client(self.address)
            event_position, inclusive = position.sdk_position()
            consumer: Any = client._create_consumer(
                self.address.consumer_group,
                self.partition,
                event_position,
                self._on_events,  # type: ignore[arg-type]  # batch mode passes a list
                event_position_inclusive=inclusive,
                owner_level=self.epoch,
                prefetch=self._prefetch,
                track_last_enqueued_event_properties=True,
            )
            self._consumer = consumer
            amqphandshakes.read_handshake_back_to_back(consumer)
            idlereads.read_before_judging_idle(consumer)  # a pause of ours is no hang
            linkrepairs.resume_after_handed_out(consumer)  # none twice after SDK reopens
            linkrepairs.bound_opens(consumer, LINK_OPEN_TIMEOUT_S)
            received_before = self._last_buffered
            opened_at: float | None = None
            try:
                if received_before is not None:
                    # A reopen after events: the stream it continues may have been replaced
                    # meanwhile, and a link after the last event received would wait in silence.
                    end = await self._stream_end(client)
                    if end < received_before:
                        self._fail(self._replaced(f"its last event is {end}"))
                        return
                # Opened here rather than inside receive(), to say when the link is open; this
                # open and the SDK's own reopens inside receive() are bounded alike.
                opening = time.monotonic()
                await consumer._open()
                opened_at = time.monotonic()
                self._linked = True
                logger.info(
                    LINK_OPEN,
                    self.partition,
                    self.epoch,
                    (opened_at - opening) * 1000,
                )
                if self.closing():
                    # Closed while opening, its cancellation lost (`linkrepairs.RECANCEL_S`).
                    return
                await consumer.receive(True, self._prefetch, None)
                if self.closing():
                    return
                ended = linkrepairs.link_error(consumer)
                if ended is not None:
                    raise ended  # the SDK's reattach was refused too (`linkrepairs`)
                raise errors.EventHubUnreachable(
                    f"partition {self.partition}: the receive link ended without an error"
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self.closing():
                    return
                if is_link_stolen(e):
                    logger.info(
                        "partition %s: link stolen, a newer owner took epoch %s over",
                        self.partition,
                        self.epoch,
                    )
                    # The thief's epoch is not in the detach: None, said "a higher epoch".
                    thief = "a newer receiver"
                    self._fail(errors.OwnershipLost(self.partition, self.epoch or 0, None, thief))
                    return
                final = linkrefusals.unmendable(
                    e,
                    partition=self.partition,
                    fully_qualified_namespace=self.address.fully_qualified_namespace,
                    eventhub_name=self.address.eventhub_name,
                    consumer_group=self.address.consumer_group,
                    after_events=self._last_buffered is not None,
                )
                if final is not None:
                    # A hub or consumer group that does not exist, or a position past the
                    # partition's end: reopening cannot mend either. The partition fails at
                    # once; the runtime paces its restarts, says a shared one once for every
                    # partition (`consumer.restarts`), and a restart's take-up moves a
                    # checkpoint past the end back (`consumer.connections`).
                    self._fail(final)
                    return
                healthy = opened_at is not None and time.monotonic() - opened_at >= HEALTHY_LINK_S
                if self._last_buffered != received_before or healthy:
                    attempts, backoff = 0, REOPEN_BACKOFF_S  # progress, or a healthy link
                attempts += 1
                busy = linkrefusals.busy_words(e)
                pause = linkrefusals.reopen_pause(backoff, e)
                self._reopens.say(
                    self.partition,
                    logging.WARNING,
                    "partition %s: %s, reopen %d/%d in %.1f s",
                    self.partition,
                    f"receive failed ({type(e).__name__})"
                    if busy is None
                    else f"Event Hubs throttled the receive link ({linkrefusals.SERVER_BUSY}: "
                    f"{busy})",
                    attempts,
                    REOPEN_ATTEMPTS,
                    pause,
                )
                if attempts >= REOPEN_ATTEMPTS:
                    self._fail(
                        errors.EventHubUnreachable(
                            f"partition {self.partition}: receiving failed {attempts} times in "
                            f"a row, last: {type(e).__name__}: {e}"
                            if busy is None
                            else f"partition {self.partition}: Event Hubs throttled the receive "
                            f"link {attempts} times in a row ({linkrefusals.SERVER_BUSY}): {busy}"
                        )
                    )
                    return
                if self._last_buffered is not None:
                    position = deliveries.ReceivePosition.after(self._last_buffered)
                await asyncio.sleep(pause)
                backoff = min(pause * 2, REOPEN_BACKOFF_MAX_S)
            finally:
                self._consumer, self._linked = None, False
                await asyncio.shield(self._close_quietly(consumer, client))

    async def _stream_end(self, client: Any) -> int:
        try:
            async with asyncio.timeout(LINK_OPEN_TIMEOUT_S):
                props = await client.get_partition_properties(self.partition)
        except TimeoutError as e:
            raise TimeoutError(
                f"no answer to the partition's properties within {LINK_OPEN_TIMEOUT_S:g} s"
            ) from e
        return int(props["last_enqueued_sequence_number"])

    def _replaced(self, found: str) -> errors.EventHubUnreachable:
        """Sequence numbers only grow: a stream below the last event received is another one."""
        return errors.EventHubUnreachable(
            f"partition {self.partition}: {found}, not above the last one received "
            f"({self._last_buffered}): the partition's stream was replaced (the Event Hub "
            "created again under its name, or the local emulator restarted)"
        )

    async def _close_quietly(self, consumer: Any, client: EventHubConsumerClient) -> None:
        await linkrepairs.stop_keep_alive(consumer)
        for closable in (consumer, client):
            try:
                await asyncio.wait_for(closable.close(), timeout=5.0)
            except Exception as e:  # closing a broken link may fail again; nothing to do
                logger.debug("partition %s: close failed: %r", self.partition, e)

    def _fail(self, failure: errors.EventHubBalancerError) -> None:
        self._buffer.fail(failure)
