"""One AMQP 1.0 connection of the emulator: SASL, sessions, links, and event delivery.

An ``asyncio.Protocol`` rather than streams and tasks: frames are handled as they arrive,
and receivers are fed synchronously when a partition grows, so delivering an event costs no
task switch. Everything written while handling one read (or one loop iteration) goes out in
one ``transport.write``. Any protocol violation closes this connection with an AMQP error
and leaves every other connection alone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from eventhub_balancer.local.eventhubs import addresses, events, hubs, management
from eventhub_balancer.local.eventhubs.amqp import decoding, frames, types
from eventhub_balancer.local.eventhubs.amqp import performatives as perf

logger = logging.getLogger(__name__)

#: Frames up to this size are accepted; the SDK uses 63,488 bytes, so this never limits it.
MAX_FRAME_SIZE = 1024 * 1024
#: Sessions per connection.
CHANNEL_MAX = 255
#: The largest event (or batch) accepted, as on the Event Hubs standard tier.
MAX_MESSAGE_SIZE = 1024 * 1024
#: Credit given to producers: enough that a producer never waits for it.
PRODUCER_CREDIT = 1000
#: Session window we announce; far beyond what any test sends between two flows.
SESSION_WINDOW = 0x7FFFFFFF
#: Events sent to one receiver per turn of the loop, so that one busy receiver cannot
#: starve the others (it continues on the next turn).
EVENTS_PER_TURN = 500
#: Pause receivers once this much is queued in the socket buffer.
WRITE_HIGH_WATER = 4 * 1024 * 1024

RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
EPOCH = "com.microsoft:epoch"

_SENDER_SETTLED = 1

_ids = itertools.count(1)


class ProtocolViolation(Exception):
    """The peer broke the protocol: close the connection with this condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Session:
    """One session (a channel): transfer ids, delivery ids and its links by handle."""

    def __init__(self, *, channel: int, remote_channel: int) -> None:
        self.channel = channel
        self.remote_channel = remote_channel
        self.next_incoming_id = 0
        self.next_outgoing_id = 0
        self.next_delivery_id = 0
        self.links: dict[int, Link] = {}


class Link:
    """The base of every link; ``handle`` is the client's, which we also use as ours."""

    def __init__(self, *, connection: Connection, session: Session, handle: int, name: str) -> None:
        self.connection = connection
        self.session = session
        self.handle = handle
        self.name = name
        self.detached = False

    def on_transfer(self, frame: frames.Frame) -> None:
        raise ProtocolViolation("amqp:not-allowed", f"link {self.name!r} does not receive")

    def on_flow(self, fields: list[Any]) -> None:
        return None

    def close(self) -> None:
        """Forget the link (detach, end, or a lost connection)."""
        self.detached = True


class OutgoingLink(Link):
    """A link on which the server sends: it spends the client's credit."""

    def __init__(
        self,
        *,
        connection: Connection,
        session: Session,
        handle: int,
        name: str,
        settled: bool,
    ) -> None:
        super().__init__(connection=connection, session=session, handle=handle, name=name)
        self.delivery_count = 0
        self.credit = 0
        self.settled = settled

    def on_flow(self, fields: list[Any]) -> None:
        delivery_count = frames.field(fields, 5, 0)
        link_credit = frames.field(fields, 6, 0)
        self.credit = max(0, (delivery_count + link_credit - self.delivery_count) & 0xFFFFFFFF)
        if self.credit > 0x7FFFFFFF:
            self.credit = 0
        self.pump()
        if frames.field(fields, 8, False) and not self.detached:
            # drain: spend the remaining credit and tell the client so.
            self.delivery_count += self.credit
            self.credit = 0
            self.connection.send_flow(self.session, link=self)

    def pump(self) -> None:
        """Send what is waiting, as far as credit allows."""

    def deliver(self, payload: bytes) -> None:
        session = self.session
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
        room = self.connection.remote_max_frame_size - perf.TRANSFER_OVERHEAD
        write = self.connection.write
        if len(payload) <= room:
            write(
                perf.transfer(
                    channel=session.channel,
                    handle=self.handle,
                    delivery_id=delivery_id,
                    message_format=0,
                    settled=self.settled,
                    more=False,
                    payload=payload,
                )
            )
            session.next_outgoing_id += 1
        else:
            for start in range(0, len(payload), room):
                write(
                    perf.transfer(
                        channel=session.channel,
                        handle=self.handle,
                        delivery_id=delivery_id,
                        message_format=0,
                        settled=self.settled,
                        more=start + room < len(payload),
                        payload=payload[start : start + room],
                    )
                )
                session.next_outgoing_id += 1
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        self.credit -= 1


class ReplyLink(OutgoingLink):
    """Our side of ``$cbs``/``$management`` replies: a queue drained by credit."""

    def __init__(self, *, address: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.address = address
        self.queue: list[bytes] = []

    def send(self, payload: bytes) -> None:
        self.queue.append(payload)
        self.pump()

    def pump(self) -> None:
        while self.queue and self.credit > 0 and not self.detached:
            self.deliver(self.queue.pop(0))


class ConsumerLink(OutgoingLink):
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


class IncomingLink(Link):
    """A link on which the client sends: we give credit and settle its deliveries."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delivery_count = 0
        self.credit = PRODUCER_CREDIT
        self._pending = bytearray()
        self._first: frames.Frame | None = None

    def on_flow(self, fields: list[Any]) -> None:
        delivery_count = frames.field(fields, 5)
        if delivery_count is not None:
            self.delivery_count = delivery_count

    def on_transfer(self, frame: frames.Frame) -> None:
        more = frames.field(frame.fields, 5, False)
        if self._first is None:
            self._first = frame
        if more or self._pending:
            self._pending += frame.payload
            if len(self._pending) > MAX_MESSAGE_SIZE + MAX_FRAME_SIZE:
                raise ProtocolViolation(
                    "amqp:link:message-size-exceeded",
                    f"a delivery exceeded {MAX_MESSAGE_SIZE} bytes",
                )
            if more:
                return
            payload = bytes(self._pending)
            self._pending = bytearray()
        else:
            payload = frame.payload
        first, self._first = self._first, None
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        self.credit -= 1
        state = self.receive(first.fields, payload)
        delivery_id = frames.field(first.fields, 1)
        if delivery_id is not None and not frames.field(first.fields, 4, False):
            self.connection.write(
                perf.disposition(
                    channel=self.session.channel, first=delivery_id, last=delivery_id, state=state
                )
            )
        if self.credit < PRODUCER_CREDIT // 2 and not self.detached:
            self.credit = PRODUCER_CREDIT
            self.connection.send_flow(self.session, link=self)

    def receive(self, fields: list[Any], payload: bytes) -> types.Described:
        raise NotImplementedError


class RequestLink(IncomingLink):
    """Our side of ``$cbs``/``$management`` requests."""

    def __init__(self, *, kind: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind

    def receive(self, fields: list[Any], payload: bytes) -> types.Described:
        connection = self.connection
        try:
            request = management.parse_request(payload)
        except decoding.DecodeError as e:
            return perf.rejected("amqp:decode-error", str(e))
        if self.kind == "cbs":
            answer = management.answer_cbs(request)
        else:
            answer = management.answer_management(
                request, namespace=connection.namespace, now_ms=connection.clock()
            )
        target = connection.reply_link(self.kind, request.reply_to)
        if target is None:
            return perf.rejected(
                "amqp:precondition-failed", f"no link to send the {self.kind} reply on"
            )
        target.send(answer)
        return perf.ACCEPTED_STATE


class ProducerLink(IncomingLink):
    """A sender of events to a hub (routed by key or round robin) or to one partition."""

    def __init__(self, *, hub: hubs.Hub, partition: hubs.Partition | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hub = hub
        self.partition = partition

    def receive(self, fields: list[Any], payload: bytes) -> types.Described:
        if len(payload) > MAX_MESSAGE_SIZE:
            return perf.rejected(
                "amqp:link:message-size-exceeded",
                f"the message is {len(payload)} bytes; the limit is {MAX_MESSAGE_SIZE}",
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


class Connection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(
        self,
        *,
        namespace: hubs.Namespace,
        registry: set[Connection],
        clock: Callable[[], int],
        container_id: str,
    ) -> None:
        self.namespace = namespace
        self.registry = registry
        self.clock = clock
        self.container_id = container_id
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.remote_max_frame_size = frames.MIN_MAX_FRAME_SIZE
        self.paused = False
        self.sessions: dict[int, Session] = {}
        self.id = next(_ids)
        self._buffer = bytearray()
        self._state = "header"
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._closing = False
        self._sasl_done = False

    # --- transport callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.registry.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget_everything()
        self.registry.discard(self)
        self.transport = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for session in list(self.sessions.values()):
            for link in list(session.links.values()):
                if isinstance(link, OutgoingLink):
                    link.pump()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
        try:
            self._process()
        except ProtocolViolation as e:
            self.fail(e.condition, e.description)
        except (decoding.DecodeError, frames.FramingError) as e:
            condition = (
                "amqp:connection:framing-error"
                if isinstance(e, frames.FramingError)
                else "amqp:decode-error"
            )
            self.fail(condition, str(e))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            # A performative with fields of the wrong type: the peer's fault, not ours.
            logger.debug("connection %d: invalid frame: %r", self.id, e)
            self.fail("amqp:invalid-field", f"invalid frame: {e}")
        self.flush()

    # --- writing -------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self.transport is not None:
            self.transport.write(b"".join(self._out))
        self._out.clear()

    def abort(self) -> None:
        """Drop the connection without a word (chaos tests: a broker that vanishes)."""
        if self.transport is not None:
            self.transport.abort()

    def fail(self, condition: str, description: str) -> None:
        """Close the connection with an AMQP error (after an open; else just drop it)."""
        logger.info("connection %d: closing with %s: %s", self.id, condition, description)
        if self._state in ("opened", "open"):
            self.write(perf.close(err=perf.error(condition, description)))
        self.flush()
        self._closing = True
        self._forget_everything()
        if self.transport is not None:
            self.transport.close()

    # --- frames in ----------------------------------------------------------------------

    def _process(self) -> None:
        buffer = self._buffer
        pos = 0
        try:
            while not self._closing:
                if self._state == "header":
                    available = len(buffer) - pos
                    if available < frames.HEADER_SIZE:
                        prefix = bytes(buffer[pos : pos + min(available, 4)])
                        if not frames.AMQP_HEADER.startswith(prefix):
                            self._bad_header()
                        return
                    header = bytes(buffer[pos : pos + frames.HEADER_SIZE])
                    pos += frames.HEADER_SIZE
                    self._on_header(header)
                    continue
                size = frames.next_frame_size(buffer, pos, max_frame_size=MAX_FRAME_SIZE)
                if size is None or len(buffer) - pos < size:
                    return
                data = bytes(buffer[pos : pos + size])
                pos += size
                self._on_frame(data)
        finally:
            del buffer[:pos]

    def _bad_header(self) -> None:
        # Protocol mismatch: answer with the header we speak, then hang up (AMQP 2.2).
        self.write(frames.AMQP_HEADER)
        self.fail("amqp:connection:framing-error", "not an AMQP 1.0 protocol header")

    def _on_header(self, header: bytes) -> None:
        if header == frames.SASL_HEADER and self._state == "header" and not self._sasl_done:
            self.write(frames.SASL_HEADER + perf.sasl_mechanisms(["ANONYMOUS", "PLAIN"]))
            self._state = "sasl"
        elif header == frames.AMQP_HEADER:
            self.write(frames.AMQP_HEADER)
            self._state = "open"
        else:
            self._bad_header()

    def _on_frame(self, data: bytes) -> None:
        code = frames.peek_code(data)
        if code == perf.DISPOSITION and self._state == "opened":
            # Receivers settle what we send them; Event Hubs does not redeliver, so a
            # disposition changes nothing here and is not worth decoding.
            return
        frame = frames.parse(data)
        if self._state == "sasl":
            if frame.type != frames.TYPE_SASL or frame.code != perf.SASL_INIT:
                raise ProtocolViolation("amqp:not-allowed", "expected sasl-init")
            self.write(perf.sasl_outcome(0))
            self._sasl_done = True
            self._state = "header"
            return
        if frame.type != frames.TYPE_AMQP:
            raise ProtocolViolation("amqp:not-allowed", "SASL frame after SASL")
        if frame.code is None:
            return  # heartbeat
        if self._state == "open":
            if frame.code != perf.OPEN:
                raise ProtocolViolation("amqp:not-allowed", "the first frame must be open")
            self._on_open(frame)
            return
        handler = self._HANDLERS.get(frame.code)
        if handler is None:
            raise ProtocolViolation("amqp:not-allowed", f"unexpected performative {frame.code:#x}")
        handler(self, frame)

    def _on_open(self, frame: frames.Frame) -> None:
        max_frame_size = frames.field(frame.fields, 2, 0xFFFFFFFF)
        self.remote_max_frame_size = max(frames.MIN_MAX_FRAME_SIZE, min(max_frame_size, 1 << 30))
        self._state = "opened"
        self.write(
            perf.open_(
                container_id=self.container_id,
                max_frame_size=MAX_FRAME_SIZE,
                channel_max=CHANNEL_MAX,
            )
        )

    def _on_begin(self, frame: frames.Frame) -> None:
        channel = frame.channel
        if channel in self.sessions:
            raise ProtocolViolation("amqp:connection:framing-error", f"channel {channel} in use")
        if channel > CHANNEL_MAX:
            raise ProtocolViolation("amqp:connection:framing-error", "channel-max exceeded")
        session = Session(channel=channel, remote_channel=channel)
        session.next_incoming_id = frames.field(frame.fields, 1, 0)
        self.sessions[channel] = session
        self.write(
            perf.begin(
                channel=channel,
                remote_channel=channel,
                next_outgoing_id=0,
                incoming_window=SESSION_WINDOW,
            )
        )

    def _session(self, frame: frames.Frame) -> Session:
        session = self.sessions.get(frame.channel)
        if session is None:
            raise ProtocolViolation(
                "amqp:connection:framing-error", f"no session on channel {frame.channel}"
            )
        return session

    def _on_end(self, frame: frames.Frame) -> None:
        session = self._session(frame)
        for link in session.links.values():
            link.close()
        del self.sessions[frame.channel]
        self.write(perf.end(channel=session.channel))

    def _on_close(self, frame: frames.Frame) -> None:
        self._forget_everything()
        self.write(perf.close())
        self.flush()
        self._closing = True
        if self.transport is not None:
            self.transport.close()

    def _on_flow(self, frame: frames.Frame) -> None:
        session = self._session(frame)
        handle = frames.field(frame.fields, 4)
        if handle is None:
            if frames.field(frame.fields, 9, False):
                self.send_flow(session)
            return
        link = session.links.get(handle)
        if link is not None and not link.detached:
            link.on_flow(frame.fields)

    def _on_transfer(self, frame: frames.Frame) -> None:
        session = self._session(frame)
        session.next_incoming_id = (session.next_incoming_id + 1) & 0xFFFFFFFF
        handle = frames.field(frame.fields, 0)
        link = session.links.get(handle)
        if link is None:
            raise ProtocolViolation(
                "amqp:session:unattached-handle", f"transfer on unattached handle {handle}"
            )
        if link.detached:
            return  # in flight when we detached it
        link.on_transfer(frame)

    def _on_detach(self, frame: frames.Frame) -> None:
        session = self._session(frame)
        handle = frames.field(frame.fields, 0)
        link = session.links.pop(handle, None)
        if link is None:
            raise ProtocolViolation(
                "amqp:session:unattached-handle", f"detach of unattached handle {handle}"
            )
        if not link.detached:
            link.close()
            self.write(perf.detach(channel=session.channel, handle=handle, closed=True, err=None))

    def _on_attach(self, frame: frames.Frame) -> None:
        session = self._session(frame)
        fields = frame.fields
        name = str(frames.field(fields, 0, ""))
        handle = int(frames.field(fields, 1, 0))
        role = bool(frames.field(fields, 2, False))
        if handle in session.links:
            raise ProtocolViolation("amqp:session:handle-in-use", f"handle {handle} is in use")
        source = frames.field(fields, 5)
        target = frames.field(fields, 6)
        snd_settle_mode = int(frames.field(fields, 3, 2))
        rcv_settle_mode = int(frames.field(fields, 4, 0))
        base = {"connection": self, "session": session, "handle": handle, "name": name}
        if role == perf.ROLE_RECEIVER:
            # The client receives: we are the sender.
            address = _address_of(source)
            # The sender's attach decides its settle mode. Event Hubs never redelivers, so
            # sending settled changes nothing for the client but spares it a disposition
            # frame per event (half of its receive cost); replies honour the request.
            settled = True
            self._attach_outgoing(
                frame, session, base, address, settled, snd_settle_mode, rcv_settle_mode
            )
        else:
            address = _address_of(target)
            self._attach_incoming(frame, session, base, address, snd_settle_mode, rcv_settle_mode)

    def _reply_attach(
        self,
        frame: frames.Frame,
        session: Session,
        *,
        role: bool,
        snd_settle_mode: int,
        rcv_settle_mode: int,
        properties: dict[Any, Any] | None = None,
        offered: list[str] | None = None,
    ) -> None:
        fields = frame.fields
        self.write(
            perf.attach(
                channel=session.channel,
                name=str(frames.field(fields, 0, "")),
                handle=int(frames.field(fields, 1, 0)),
                role=role,
                snd_settle_mode=snd_settle_mode,
                rcv_settle_mode=rcv_settle_mode,
                source=_echo(frames.field(fields, 5), perf.SOURCE),
                target=_echo(frames.field(fields, 6), perf.TARGET),
                initial_delivery_count=0 if role == perf.ROLE_SENDER else None,
                max_message_size=MAX_MESSAGE_SIZE,
                offered_capabilities=offered,
                properties=properties,
            )
        )

    def _refuse(
        self, frame: frames.Frame, session: Session, role: bool, condition: str, text: str
    ) -> None:
        """Attach, then detach at once with an error: how a broker refuses a link."""
        handle = int(frames.field(frame.fields, 1, 0))
        self._reply_attach(frame, session, role=role, snd_settle_mode=2, rcv_settle_mode=0)
        refused = Link(connection=self, session=session, handle=handle, name="refused")
        refused.detached = True
        session.links[handle] = refused
        self.write(
            perf.detach(
                channel=session.channel,
                handle=handle,
                closed=True,
                err=perf.error(condition, text),
            )
        )

    def _attach_outgoing(
        self,
        frame: frames.Frame,
        session: Session,
        base: dict[str, Any],
        address: str | None,
        settled: bool,
        snd_settle_mode: int,
        rcv_settle_mode: int,
    ) -> None:
        role = perf.ROLE_SENDER
        try:
            parsed = addresses.parse(address)
        except addresses.InvalidAddress as e:
            self._refuse(frame, session, role, "amqp:not-found", str(e))
            return
        if parsed.kind in ("cbs", "management"):
            link: Link = ReplyLink(address=parsed.kind, settled=settled, **base)
            self._reply_attach(
                frame,
                session,
                role=role,
                snd_settle_mode=snd_settle_mode,
                rcv_settle_mode=rcv_settle_mode,
            )
            session.links[link.handle] = link
            return
        if parsed.kind != "consumer" or parsed.partition is None:
            self._refuse(
                frame,
                session,
                role,
                "amqp:not-allowed",
                f"receive from '{parsed.hub}/ConsumerGroups/<group>/Partitions/<id>'",
            )
            return
        try:
            hub = self.namespace.hub(parsed.hub)
            partition = hub.partition(parsed.partition)
            readers = hub.readers(parsed.consumer_group or "", parsed.partition)
            source = frames.field(frame.fields, 5)
            filters = frames.field(_described_fields(source), 7)
            position = addresses.start_position(filters)
        except hubs.EntityNotFound as e:
            self._refuse(frame, session, role, "amqp:not-found", str(e))
            return
        except hubs.PartitionNotFound as e:
            self._refuse(frame, session, role, "com.microsoft:argument-out-of-range", str(e))
            return
        except addresses.InvalidAddress as e:
            self._refuse(frame, session, role, "amqp:invalid-field", str(e))
            return
        properties = _map(frames.field(frame.fields, 13))
        owner_level = properties.get(EPOCH)
        desired = frames.field(frame.fields, 12) or []
        desired = [str(d) for d in (desired if isinstance(desired, list) else [desired])]
        link = ConsumerLink(
            partition=partition,
            readers=readers,
            next_sequence=_first_sequence(partition, position),
            runtime_metrics=RUNTIME_METRIC in desired,
            settled=settled,
            **base,
        )
        try:
            stolen = readers.claim(link, None if owner_level is None else int(owner_level))
        except hubs.OwnerLevelConflict as e:
            link.close()
            self._refuse(frame, session, role, "amqp:link:stolen", str(e))
            return
        for other in stolen:
            assert isinstance(other, ConsumerLink)
            other.steal(
                f"receiver '{link.name}' with a higher owner level ({owner_level}) opened on "
                f"partition {partition.id} of '{hub.name}'"
            )
        self._reply_attach(
            frame,
            session,
            role=role,
            snd_settle_mode=_SENDER_SETTLED,
            rcv_settle_mode=rcv_settle_mode,
            properties=None if owner_level is None else {types.Symbol(EPOCH): owner_level},
            offered=[d for d in desired if d == RUNTIME_METRIC],
        )
        session.links[link.handle] = link

    def _attach_incoming(
        self,
        frame: frames.Frame,
        session: Session,
        base: dict[str, Any],
        address: str | None,
        snd_settle_mode: int,
        rcv_settle_mode: int,
    ) -> None:
        role = perf.ROLE_RECEIVER
        try:
            parsed = addresses.parse(address)
            link: IncomingLink
            if parsed.kind in ("cbs", "management"):
                link = RequestLink(kind=parsed.kind, **base)
            elif parsed.kind == "hub":
                link = ProducerLink(hub=self.namespace.hub(parsed.hub), partition=None, **base)
            elif parsed.kind == "partition":
                hub = self.namespace.hub(parsed.hub)
                link = ProducerLink(
                    hub=hub, partition=hub.partition(parsed.partition or ""), **base
                )
            else:
                raise addresses.InvalidAddress(f"cannot send to a consumer group ({address})")
        except (addresses.InvalidAddress, hubs.EntityNotFound) as e:
            self._refuse(frame, session, role, "amqp:not-found", str(e))
            return
        except hubs.PartitionNotFound as e:
            self._refuse(frame, session, role, "com.microsoft:argument-out-of-range", str(e))
            return
        link.delivery_count = int(frames.field(frame.fields, 9, 0))
        self._reply_attach(
            frame,
            session,
            role=role,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
        )
        session.links[link.handle] = link
        self.send_flow(session, link=link)

    _HANDLERS: dict[int, Callable[[Connection, frames.Frame], None]] = {
        perf.BEGIN: _on_begin,
        perf.ATTACH: _on_attach,
        perf.FLOW: _on_flow,
        perf.TRANSFER: _on_transfer,
        perf.DETACH: _on_detach,
        perf.END: _on_end,
        perf.CLOSE: _on_close,
        perf.DISPOSITION: lambda self, frame: None,
    }

    # --- frames out ---------------------------------------------------------------------

    def send_flow(self, session: Session, *, link: Link | None = None) -> None:
        delivery_count: int | None = None
        credit: int | None = None
        if isinstance(link, IncomingLink | OutgoingLink):
            delivery_count, credit = link.delivery_count, link.credit
        self.write(
            perf.flow(
                channel=session.channel,
                next_incoming_id=session.next_incoming_id,
                incoming_window=SESSION_WINDOW,
                next_outgoing_id=session.next_outgoing_id,
                outgoing_window=SESSION_WINDOW,
                handle=None if link is None else link.handle,
                delivery_count=delivery_count,
                link_credit=credit,
            )
        )

    def detach_with_error(self, link: Link, *, condition: str, description: str) -> None:
        if link.detached:
            return
        link.close()
        self.write(
            perf.detach(
                channel=link.session.channel,
                handle=link.handle,
                closed=True,
                err=perf.error(condition, description),
            )
        )

    def reply_link(self, kind: str, reply_to: str | None) -> ReplyLink | None:
        """The link a request's reply goes on: same kind, same connection."""
        candidates = [
            link
            for session in self.sessions.values()
            for link in session.links.values()
            if isinstance(link, ReplyLink) and not link.detached and link.address == kind
        ]
        if reply_to is not None:
            named = [link for link in candidates if link.name and reply_to in (link.name,)]
            if named:
                return named[0]
        return candidates[-1] if candidates else None

    def _forget_everything(self) -> None:
        for session in self.sessions.values():
            for link in session.links.values():
                link.close()
        self.sessions.clear()


def _described_fields(value: Any) -> list[Any]:
    if isinstance(value, types.Described) and isinstance(value.value, list):
        return value.value
    return []


def _address_of(terminus: Any) -> str | None:
    address = frames.field(_described_fields(terminus), 0)
    if isinstance(address, bytes):
        return address.decode("utf-8", "replace")
    return None if address is None else str(address)


def _echo(terminus: Any, code: int) -> Any:
    """The terminus as the client sent it (the SDK detaches when one is missing)."""
    if isinstance(terminus, types.Described):
        return terminus
    return types.Described(types.ULong(code), [None])


def _map(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return {}


def _first_sequence(partition: hubs.Partition, position: addresses.StartPosition) -> int:
    if position.field == "latest":
        return partition.next_sequence_number
    if position.field == "sequence":
        return position.value if position.inclusive else position.value + 1
    if position.field == "time":
        return partition.sequence_after_time(position.value, inclusive=position.inclusive)
    if position.value < 0:
        return partition.begin_sequence_number
    return partition.sequence_after_offset(position.value, inclusive=position.inclusive)
