"""The links that carry events: receivers reading a partition, producers appending to a hub.

The hot path of the emulator; kept apart from the connection's frame handling and from the
request-reply links so that its cost is easy to read and to measure. Receivers are fed
synchronously when a partition grows (`hubs.Partition.listeners`), so delivering an event
costs no task switch.
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.eventhubs import events, hubs, links
from eventhub_balancer_devstack.eventhubs.amqp import decoding, frames, types
from eventhub_balancer_devstack.eventhubs.amqp import performatives as perf

#: Events sent to one receiver per turn of the loop, so that one busy receiver cannot
#: starve the others (it continues on the next turn).
EVENTS_PER_TURN = 500


class ConsumerLink(links.OutgoingLink):
    """A receiver on a partition: delivers stored events from its position onwards."""

    def __init__(
        self,
        *,
        partition: hubs.Partition,
        readers: hubs.Readers,
        next_sequence: int,
        runtime_metrics: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partition = partition
        self.readers = readers
        self.next_sequence = next_sequence
        self.runtime_metrics = runtime_metrics
        self._scheduled = False
        partition.listeners.add(self.pump)

    def pump(self) -> None:
        connection = self.connection
        if self.detached or self.credit <= 0 or connection.paused:
            return
        batch = self.partition.read(self.next_sequence, min(self.credit, EVENTS_PER_TURN))
        if not batch:
            return
        if self.runtime_metrics:
            last = self.partition.last()
            assert last is not None  # batch is not empty
            metrics = events.runtime_metrics(
                last_sequence_number=last.sequence_number,
                last_offset=last.offset,
                last_enqueued_ms=last.enqueued_ms,
                now_ms=connection.clock(),
            )
            for event in batch:
                head = event.head_size
                self.deliver(event.payload[:head] + metrics + event.payload[head:])
        elif (
            len(batch) > 1
            and max(len(e.payload) for e in batch)
            <= connection.remote_max_frame_size - perf.TRANSFER_OVERHEAD
        ):
            self._deliver_small(batch)
        else:
            for event in batch:
                self.deliver(event.payload)
        self.next_sequence = batch[-1].sequence_number + 1
        if self.credit > 0 and not self._scheduled:
            # More may be waiting: continue on the next turn, after other links had theirs.
            self._scheduled = True
            connection.loop.call_soon(self._resume)

    def _resume(self) -> None:
        self._scheduled = False
        self.pump()

    def _deliver_small(self, batch: list[events.StoredEvent]) -> None:
        # The hot path: one frame per event, built without per-frame bookkeeping.
        session = self.session
        channel, handle, settled = session.channel, self.handle, self.settled
        first_id = session.next_delivery_id
        transfer = perf.transfer
        frames_out = [
            transfer(
                channel=channel,
                handle=handle,
                delivery_id=(first_id + i) & 0xFFFFFFFF,
                message_format=0,
                settled=settled,
                more=False,
                payload=event.payload,
            )
            for i, event in enumerate(batch)
        ]
        count = len(batch)
        self.connection.write(b"".join(frames_out))
        session.next_delivery_id = (first_id + count) & 0xFFFFFFFF
        session.next_outgoing_id += count
        self.delivery_count = (self.delivery_count + count) & 0xFFFFFFFF
        self.credit -= count

    def steal(self, description: str) -> None:
        """Another receiver took the partition: close this one with ``amqp:link:stolen``."""
        self.connection.detach_with_error(
            self, condition="amqp:link:stolen", description=description
        )

    def close(self) -> None:
        if not self.detached:
            self.partition.listeners.discard(self.pump)
            self.readers.release(self)
        super().close()


class ProducerLink(links.IncomingLink):
    """A sender of events to a hub (routed by key or round robin) or to one partition."""

    def __init__(self, *, hub: hubs.Hub, partition: hubs.Partition | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hub = hub
        self.partition = partition

    def receive(self, fields: list[Any], payload: bytes) -> types.Described:
        if len(payload) > links.MAX_MESSAGE_SIZE:
            return perf.rejected(
                "amqp:link:message-size-exceeded",
                f"the message is {len(payload)} bytes; the limit is {links.MAX_MESSAGE_SIZE}",
            )
        try:
            if frames.field(fields, 3, 0) == perf.BATCH_FORMAT:
                partition_key, batch = events.split_batch(payload)
            else:
                event = events.parse(payload)
                partition_key, batch = event.partition_key, [event]
        except decoding.DecodeError as e:
            return perf.rejected("amqp:decode-error", f"the message is malformed: {e}")
        partition = self.partition or self.hub.route(partition_key)
        partition.append(batch, partition_key=partition_key, now_ms=self.connection.clock())
        return perf.ACCEPTED_STATE
