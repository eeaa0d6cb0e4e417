"""A receive connection judged idle only after reading what waits on its socket.

The receiver's connections advertise an idle time-out (`receiving.IDLE_TIMEOUT_S`), and the
SDK (azure-eventhub 5.15's ``_pyamqp``) closes a connection that has received no frame for
that long, to find a hung one. But it compares against the last frame *it read*, and it
judges before reading: at the top of each ``listen`` and before each frame it sends. A
connection reads only while something drives it, and the pod stops driving a healthy one
for longer than the time-out whenever its handler is behind (the buffer full, the receive
loop holds: backpressure), its event loop is blocked (a handler that blocks it, a long GC
pause) or the SDK's keep-alive reads nothing (it reads as many frames as the link has
credit: none while the buffer is full). The first read after such a pause closed the
connection, though the empty frames Event Hubs sent meanwhile sat unread on its socket, and
the SDK's reconnect delivered the events of its own buffer a second time: the receiver
failed the partition as if its stream had been replaced.

Here each connection of a receive link reads the frames already waiting before it is
judged: one frame read is a frame received, and the SDK's own check then finds the
connection alive. A hung connection has nothing waiting once what arrived before the hang
is read, and is closed as before, at most one idle time-out after the pod reads it again.
Private SDK names, like ``_create_consumer`` in `receiving`: where they are missing,
nothing is done and the SDK judges as it does on its own.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

#: How long one catch-up read waits for a frame. What it is after has already arrived
#: (the empty frames of a healthy connection), so a frame not there at once is not coming.
CATCH_UP_READ_S = 0.05

#: The most frames one catch-up reads: each frame read is received, so the first one
#: normally ends it; the bound keeps a broken peer from holding the caller.
CATCH_UP_FRAMES = 8

#: Set on a connection made to catch up (a handler opened twice keeps its connection).
MARK = "_ehb_catches_up"


def read_before_judging_idle(consumer: Any) -> None:
    """Each connection the SDK consumer ``consumer``'s handlers open (``_create_handler``,
    then the handler's ``open_async``) reads the frames waiting on its socket before the
    SDK judges it idle."""
    create = getattr(consumer, "_create_handler", None)
    if not callable(create):
        return

    def create_handler(auth: Any) -> None:
        create(auth)
        _on_open(getattr(consumer, "_handler", None))

    consumer._create_handler = create_handler


def _on_open(handler: Any) -> None:
    opening = getattr(handler, "open_async", None)
    if not callable(opening):
        return

    async def open_async(*args: Any, **kwargs: Any) -> None:
        await opening(*args, **kwargs)
        catch_up_before_judging(getattr(handler, "_connection", None))

    handler.open_async = open_async


def catch_up_before_judging(connection: Any) -> None:
    """Make ``connection`` (a ``_pyamqp`` aio Connection) read what waits on its socket
    before its ``listen`` and its sending judge it idle."""
    names = ("listen", "_process_outgoing_frame", "_read_frame")
    if connection is None or getattr(connection, MARK, False):
        return
    if not all(callable(getattr(connection, name, None)) for name in names):
        return
    if not all(hasattr(connection, n) for n in ("_idle_timeout", "_last_frame_received_time")):
        return
    setattr(connection, MARK, True)
    connection.listen = _after_catching_up(connection, connection.listen)
    connection._process_outgoing_frame = _after_catching_up(
        connection, connection._process_outgoing_frame
    )


def _after_catching_up(
    connection: Any, call: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def caught_up(*args: Any, **kwargs: Any) -> Any:
        await _catch_up(connection)
        return await call(*args, **kwargs)

    return caught_up


def _stale(connection: Any) -> bool:
    idle = connection._idle_timeout
    last = connection._last_frame_received_time
    return bool(idle and last and time.time() - last > idle)


async def _catch_up(connection: Any) -> None:
    """Read waiting frames while the connection looks idle (the SDK's own test) and a read
    brings one; a read that brings nothing leaves the judging to the SDK."""
    for _ in range(CATCH_UP_FRAMES):
        if not _stale(connection) or getattr(connection, "_error", None) is not None:
            return
        can_read = getattr(connection, "_can_read", None)
        if callable(can_read) and not can_read():
            return
        before = connection._last_frame_received_time
        try:
            await connection._read_frame(wait=CATCH_UP_READ_S)
        except OSError:
            return  # the SDK's own read meets it again and says so
        if connection._last_frame_received_time == before:
            return
