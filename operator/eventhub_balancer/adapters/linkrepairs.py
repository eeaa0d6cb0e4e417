"""Six flaws of the SDK's aio receive link (azure-eventhub 5.15), mended from outside.

- A cancellation can be dropped (`RECANCEL_S`): `cancel_until_done` cancels a receive task
  again until it ends, within a bound.
- The link keeps the delivery tag of every transfer it ever received
  (`forget_delivery_tags`): about 70 bytes per event for the life of the link.
- A close waits up to a second for the link's keep-alive task (`stop_keep_alive`).
- A link detached with an error that the SDK's own reattach cannot mend (Event Hubs
  throttling, say) ends its ``receive`` as if nothing were wrong, the error kept on the
  link (`link_error`).
- Its own reconnect, after a connection closed by its idle time-out, waits for ever for a
  handshake that Event Hubs never answers (`bound_opens`).
- Its own reconnect delivers again the events it kept but had not handed out yet
  (`resume_after_handed_out`).

Kept apart from ``adapters.receiving``, which drives the link, because each of these works
on the SDK's private names (like ``_create_consumer``, whose use ``tests/install`` holds to
the pinned minor) or on its behaviour under cancellation, and must be read, and dropped,
when the SDK changes. Where a private name is missing, nothing is done and the SDK behaves as
it does on its own. ``adapters.consumergroups`` closes its probe's link the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from azure.eventhub.exceptions import OperationTimeoutError

#: A receive task that has not ended this long after it was cancelled is cancelled again. The
#: SDK reads every frame under ``asyncio.wait_for``, which in Python 3.11 drops a cancellation
#: that arrives in the same turn of the loop as the frame it waited for: the task then goes
#: on receiving, as if never cancelled, until its link is stolen (a released partition's
#: final checkpoint waited 15 s for that in a benchmark, and its pod turned NotReady).
RECANCEL_S = 0.05
#: The longest a close waits for its receive task to end (it is cancelled again every
#: `RECANCEL_S` meanwhile); past it the task is left to end on its own, and logged.
CLOSE_TIMEOUT_S = 15.0


async def cancel_until_done(
    task: asyncio.Task[Any],
    *,
    again: Callable[[], bool],
    every: float = RECANCEL_S,
    limit: float = CLOSE_TIMEOUT_S,
) -> bool:
    """Cancel ``task`` and wait for it to end; while it goes on and ``again()`` says it is
    still in the SDK's receiving (not in its own cleanup, which a cancellation must not cut
    short), cancel it again every ``every`` seconds (a cancellation the SDK dropped, see
    `RECANCEL_S`). False when it has not ended within ``limit``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    task.cancel()
    while not task.done():
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.wait({task}, timeout=min(every, left))
        if not task.done() and again():
            task.cancel()
    return True


def forget_delivery_tags(consumer: Any) -> None:
    """Empty the set of delivery tags the SDK's receive link keeps of every transfer.

    azure-eventhub 5.15's AMQP receiver link (``_pyamqp``'s ``ReceiverLink``) adds each
    transfer's delivery tag (a bytes object) to a set and removes it only when it sends a
    disposition for it. An Event Hubs consumer never sends one (its position is the
    checkpoint, not a settlement per event), so the set held every tag the link ever
    received: about 70 bytes per event for the life of the link (a pod grew 2.7 MB a minute
    at 1,000 events/s; ``ehb bench soak`` measures it), until its memory limit. The set only
    guards a disposition against an unknown tag, and none is ever sent on this link, so it
    is emptied at each delivery: it holds at most one delivery's tags. Private SDK names,
    like ``_create_consumer``: where they are missing nothing is done.
    """
    handler = getattr(consumer, "_handler", None)
    tags = getattr(getattr(handler, "_link", None), "_received_delivery_tags", None)
    if isinstance(tags, set):
        tags.clear()


async def stop_keep_alive(consumer: Any) -> None:
    """Cancel the SDK's keep-alive task of a link we are about to close.

    The aio handler's keep-alive task looks at its shutdown flag once a second, and the
    handler's ``close_async`` waits for that task: every receiver close (so every release of a
    partition) took up to a second. Nothing is left to keep alive once we close, so the task
    is cancelled and awaited first (private SDK names, like ``_create_consumer``; where they
    are missing nothing is done and the SDK's own close waits as before).
    """
    handler = getattr(consumer, "_handler", None)
    task = getattr(handler, "_keep_alive_thread", None)
    if isinstance(task, asyncio.Future):
        handler._keep_alive_thread = None  # type: ignore[union-attr]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def link_error(consumer: Any) -> BaseException | None:
    """The error the SDK kept on a receive link whose ``receive`` returned.

    azure-eventhub 5.15's aio receive, when Event Hubs detaches its link with an error it
    retries (``com.microsoft:server-busy``), reattaches at once; when that attach is refused
    too, ``receive`` returns as if the link had ended normally, and the detach's error is
    left on the link (``_error``). So it does when a reconnect's open did not answer in time
    (`bound_opens`). Read here so that the receiver sees why its link ended; private SDK
    names, like ``_create_consumer``: where they are missing, None.
    """
    handler = getattr(consumer, "_handler", None)
    error = getattr(getattr(handler, "_link", None), "_error", None)
    if not isinstance(error, BaseException):
        opening = getattr(consumer, "_open", None)
        error = opening.timed_out if isinstance(opening, _BoundedOpen) else None
    return error if isinstance(error, BaseException) else None


def bound_opens(consumer: Any, limit: float) -> None:
    """Bound every opening of ``consumer``'s link to ``limit`` seconds, the SDK's own
    reconnects included.

    azure-eventhub 5.15's aio receive opens its link again on a new connection when the old
    one broke (its idle time-out, say), and that open has no bound of its own: a connect
    whose SYN goes unanswered waits for the kernel, and a connection accepted but never
    answered (a load balancer whose back end is gone, a handshake lost) waits for ever,
    reporting nothing. Past ``limit`` the open raises the SDK's own
    ``OperationTimeoutError``, which its reconnect does not retry: the receive ends (as if
    nothing were wrong when the reconnect swallows it: `link_error` says it), and the
    caller's reopens, which count and fail the partition, take over. Private SDK names,
    like ``_create_consumer``: where they are missing, nothing is done.
    """
    opening = getattr(consumer, "_open", None)
    if callable(opening) and not isinstance(opening, _BoundedOpen):
        consumer._open = _BoundedOpen(opening, limit)


class _BoundedOpen:
    """A consumer's ``_open`` within a time limit (`bound_opens`); ``timed_out`` is the error
    of its last call when that call did not answer in time."""

    def __init__(self, opening: Callable[[], Awaitable[None]], limit: float) -> None:
        self.opening = opening
        self.limit = limit
        self.timed_out: OperationTimeoutError | None = None

    async def __call__(self) -> None:
        self.timed_out = None
        try:
            async with asyncio.timeout(self.limit):
                await self.opening()
        except TimeoutError as e:
            self.timed_out = OperationTimeoutError(
                f"the receive link did not open within {self.limit:g} s: Event Hubs did not answer"
            )
            raise self.timed_out from e


def resume_after_handed_out(consumer: Any) -> None:
    """Make the SDK's own reconnects of ``consumer``'s link go on after the last event it
    handed out, with nothing kept from the old link.

    azure-eventhub 5.15's aio consumer keeps the events its link received in a buffer
    (``_message_buffer``) until it hands them out, and hands them out only as fast as the
    receiver takes them: while the handler is behind, the buffer holds up to a prefetch of
    them. When its link breaks then (a hung connection closed by its idle time-out, a link
    Event Hubs detached on its own: ``amqp:link:detach-forced``), it reopens the link after
    the last event it handed out (``_last_received_event``) and keeps the buffer: the new
    link delivers the kept events a second time, behind the first copies, and the receiver
    met them below its last event, as if the stream had been replaced. Where it reopens from
    was also read when the link broke, not when it reopens: events handed out meanwhile came
    twice as well, and so did the last one of a link opened at an inclusive position.

    Here each reopen (every handler created after the first) empties the buffer and starts
    right after the event handed out last, so the new link delivers each event the receiver
    has not had, once. The old link is closed by then: nothing more arrives on it. A stream
    truly replaced (the hub created again) still meets the receiver's own check. Private SDK
    names, like ``_create_consumer``: where they are missing, nothing is done.
    """
    create = getattr(consumer, "_create_handler", None)
    names = ("_message_buffer", "_last_received_event", "_offset", "_offset_inclusive")
    if not callable(create) or not all(hasattr(consumer, name) for name in names):
        return
    opened = False

    def create_handler(auth: Any) -> None:
        nonlocal opened
        if opened:
            buffer = consumer._message_buffer
            if hasattr(buffer, "clear"):
                buffer.clear()
            last = consumer._last_received_event
            if last is not None:
                consumer._offset = last.offset
                consumer._offset_inclusive = False
        opened = True
        create(auth)

    consumer._create_handler = create_handler
