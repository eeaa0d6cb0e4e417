"""The ``$cbs`` and ``$management`` links: requests come in on one, replies go out on another.

Apart from the event links because they carry no events: each request is answered at once by
`management`, and the answer queued on the reply link of the same kind on the same connection.
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.eventhubs import links, management
from eventhub_balancer_devstack.eventhubs.amqp import decoding, types
from eventhub_balancer_devstack.eventhubs.amqp import performatives as perf


class ReplyLink(links.OutgoingLink):
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


class RequestLink(links.IncomingLink):
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
        target = reply_link(connection, self.kind, request.reply_to)
        if target is None:
            return perf.rejected(
                "amqp:precondition-failed", f"no link to send the {self.kind} reply on"
            )
        target.send(answer)
        return perf.ACCEPTED_STATE


def reply_link(connection: links.Carrier, kind: str, reply_to: str | None) -> ReplyLink | None:
    """The link a request's reply goes on: same kind, same connection."""
    candidates = [
        link
        for session in connection.sessions.values()
        for link in session.links.values()
        if isinstance(link, ReplyLink) and not link.detached and link.address == kind
    ]
    if reply_to is not None:
        named = [link for link in candidates if link.name and reply_to in (link.name,)]
        if named:
            return named[0]
    return candidates[-1] if candidates else None
