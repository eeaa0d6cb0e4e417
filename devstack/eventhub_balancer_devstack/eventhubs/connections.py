"""One AMQP 1.0 connection of the emulator: SASL, open, sessions, and frames to their links.

An ``asyncio.Protocol`` rather than streams and tasks: frames are handled as they arrive,
and receivers are fed synchronously when a partition grows, so delivering an event costs no
task switch. Everything written while handling one read (or one loop iteration) goes out in
one ``transport.write``. Any protocol violation closes this connection with an AMQP error
and leaves every other connection alone.

Like Event Hubs, it keeps a client's idle-time-out (the open's field): when the client
advertises one, an empty frame goes out whenever nothing else was sent for half of it
(`_beat`), so that a client closes only a connection that hears nothing at all. A connection
can be made to hang (`hang`): the socket stays open and everything sent either way is
dropped, as a NAT gateway or firewall that lost the flow does.

This module is the connection's state machine only; what a link does lives in `links`
(the bases), `eventlinks` and `requestlinks`, and which link an attach opens in `attaching`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from eventhub_balancer_devstack.eventhubs import attaching, hubs, links
from eventhub_balancer_devstack.eventhubs.amqp import decoding, frames
from eventhub_balancer_devstack.eventhubs.amqp import performatives as perf

logger = logging.getLogger(__name__)

#: Sessions per connection.
CHANNEL_MAX = 255
#: Session window we announce; far beyond what any test sends between two flows.
SESSION_WINDOW = 0x7FFFFFFF
#: Pause receivers once this much is queued in the socket buffer.
WRITE_HIGH_WATER = 4 * 1024 * 1024

#: The condition a frame the connection cannot place closes it with.
FRAMING_ERROR = "amqp:connection:framing-error"

_ids = itertools.count(1)


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
        self.sessions: dict[int, links.Session] = {}
        #: channels whose session the peer ended, until it begins one there again
        self._ended: set[int] = set()
        self.id = next(_ids)
        self._buffer = bytearray()
        self._state = "header"
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._closing = False
        self._sasl_done = False
        #: dropping everything both ways, the socket left open (`hang`)
        self.hung = False
        #: half the client's idle-time-out, in seconds (None: it advertised none)
        self._beat_every: float | None = None
        self._sent_at = self.loop.time()
        self._beat_timer: asyncio.TimerHandle | None = None

    # --- transport callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.registry.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_beating()
        self._forget_everything()
        self.registry.discard(self)
        self.transport = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for session in list(self.sessions.values()):
            for link in list(session.links.values()):
                if isinstance(link, links.OutgoingLink):
                    link.pump()

    def data_received(self, data: bytes) -> None:
        if self._closing or self.hung:
            return
        self._buffer += data
        try:
            self._process()
        except links.ProtocolViolation as e:
            self.fail(e.condition, e.description)
        except (decoding.DecodeError, frames.FramingError) as e:
            condition = FRAMING_ERROR if isinstance(e, frames.FramingError) else "amqp:decode-error"
            self.fail(condition, str(e))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            # A performative with fields of the wrong type: the peer's fault, not ours.
            logger.debug("connection %d: invalid frame: %r", self.id, e)
            self.fail("amqp:invalid-field", f"invalid frame: {e}")
        self.flush()

    # --- writing -------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.hung:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self.transport is not None and not self.hung:
            self.transport.write(b"".join(self._out))
            self._sent_at = self.loop.time()
        self._out.clear()

    def hang(self) -> None:
        """From now on drop everything both ways and send nothing, the socket left open (chaos
        tests: a NAT gateway or firewall that silently lost the flow)."""
        self.hung = True
        self._out.clear()
        self._stop_beating()

    def _beat(self) -> None:
        """An empty frame if nothing went out for half the client's idle-time-out (as Event
        Hubs does), then the next look when the next half is due."""
        self._beat_timer = None
        every = self._beat_every
        if every is None or self.transport is None or self._closing or self.hung:
            return
        if self.loop.time() >= self._sent_at + every:
            self.write(frames.EMPTY_FRAME)
            self.flush()
        self._beat_timer = self.loop.call_at(self._sent_at + every, self._beat)

    def _stop_beating(self) -> None:
        if self._beat_timer is not None:
            self._beat_timer.cancel()
            self._beat_timer = None

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
                size = frames.next_frame_size(buffer, pos, max_frame_size=links.MAX_FRAME_SIZE)
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
        self.fail(FRAMING_ERROR, "not an AMQP 1.0 protocol header")

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
                raise links.ProtocolViolation("amqp:not-allowed", "expected sasl-init")
            self.write(perf.sasl_outcome(0))
            self._sasl_done = True
            self._state = "header"
            return
        if frame.type != frames.TYPE_AMQP:
            raise links.ProtocolViolation("amqp:not-allowed", "SASL frame after SASL")
        if frame.code is None:
            return  # heartbeat
        if self._state == "open":
            if frame.code != perf.OPEN:
                raise links.ProtocolViolation("amqp:not-allowed", "the first frame must be open")
            self._on_open(frame)
            return
        if frame.channel in self._ended and frame.code not in (perf.BEGIN, perf.CLOSE):
            return  # sent after its own end (pyamqp detaches a link it left): changes nothing
        handler = self._HANDLERS.get(frame.code)
        if handler is None:
            raise links.ProtocolViolation(
                "amqp:not-allowed", f"unexpected performative {frame.code:#x}"
            )
        handler(self, frame)

    def _on_open(self, frame: frames.Frame) -> None:
        max_frame_size = frames.field(frame.fields, 2, 0xFFFFFFFF)
        self.remote_max_frame_size = max(frames.MIN_MAX_FRAME_SIZE, min(max_frame_size, 1 << 30))
        self._state = "opened"
        self.write(
            perf.open_(
                container_id=self.container_id,
                max_frame_size=links.MAX_FRAME_SIZE,
                channel_max=CHANNEL_MAX,
            )
        )
        idle_ms = frames.field(frame.fields, 4, 0)
        if idle_ms > 0:
            self._beat_every = idle_ms / 2000
            self._beat_timer = self.loop.call_at(self.loop.time() + self._beat_every, self._beat)

    def _on_begin(self, frame: frames.Frame) -> None:
        channel = frame.channel
        if channel in self.sessions:
            raise links.ProtocolViolation(FRAMING_ERROR, f"channel {channel} in use")
        if channel > CHANNEL_MAX:
            raise links.ProtocolViolation(FRAMING_ERROR, "channel-max exceeded")
        self._ended.discard(channel)
        session = links.Session(channel=channel, remote_channel=channel)
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

    def _session(self, frame: frames.Frame) -> links.Session:
        session = self.sessions.get(frame.channel)
        if session is None:
            raise links.ProtocolViolation(FRAMING_ERROR, f"no session on channel {frame.channel}")
        return session

    def _on_end(self, frame: frames.Frame) -> None:
        session = self._session(frame)
        for link in session.links.values():
            link.close()
        del self.sessions[frame.channel]
        self._ended.add(frame.channel)
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
            raise links.ProtocolViolation(
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
            raise links.ProtocolViolation(
                "amqp:session:unattached-handle", f"detach of unattached handle {handle}"
            )
        if not link.detached:
            link.close()
            self.write(perf.detach(channel=session.channel, handle=handle, closed=True, err=None))

    def _on_attach(self, frame: frames.Frame) -> None:
        session = self._session(frame)
        attaching.attach(self, frame, session)

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

    def send_flow(self, session: links.Session, *, link: links.Link | None = None) -> None:
        delivery_count: int | None = None
        credit: int | None = None
        if isinstance(link, links.IncomingLink | links.OutgoingLink):
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

    def detach_with_error(self, link: links.Link, *, condition: str, description: str) -> None:
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

    def _forget_everything(self) -> None:
        for session in self.sessions.values():
            for link in session.links.values():
                link.close()
        self.sessions.clear()
