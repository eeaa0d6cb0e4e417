"""Sessions and the base classes of the links they carry, apart from the connection.

A link spends or gives credit and numbers its transfers the same way whatever it carries;
that bookkeeping lives here once. The kinds of link build on it in `eventlinks` (events in
and out) and `requestlinks` ($cbs and $management), and `connections` routes frames to them.
Links see their connection only through `Carrier`, so that none of them imports it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from eventhub_balancer_devstack.eventhubs import hubs
from eventhub_balancer_devstack.eventhubs.amqp import frames, types
from eventhub_balancer_devstack.eventhubs.amqp import performatives as perf

#: Frames up to this size are accepted; the SDK uses 63,488 bytes, so this never limits it.
MAX_FRAME_SIZE = 1024 * 1024
#: The largest event (or batch) accepted, as on the Event Hubs standard tier.
MAX_MESSAGE_SIZE = 1024 * 1024
#: Credit given to producers: enough that a producer never waits for it.
PRODUCER_CREDIT = 1000


class ProtocolViolation(Exception):
    """The peer broke the protocol: close the connection with this condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Carrier(Protocol):
    """What a link needs of the connection that carries it (`connections.Connection`)."""

    namespace: hubs.Namespace
    clock: Callable[[], int]
    loop: asyncio.AbstractEventLoop
    remote_max_frame_size: int
    paused: bool
    sessions: dict[int, Session]

    def write(self, data: bytes) -> None: ...

    def send_flow(self, session: Session, *, link: Link | None = None) -> None: ...

    def detach_with_error(self, link: Link, *, condition: str, description: str) -> None: ...


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

    def __init__(self, *, connection: Carrier, session: Session, handle: int, name: str) -> None:
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
        connection: Carrier,
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
