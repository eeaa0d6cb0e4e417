"""The pod's acknowledgement patch: one request at a time, awaited briefly, taken however late.

An admission webhook on ConfigMaps, or an API server under load, can take seconds to answer a
write. The runtime's loop awaits its acknowledgement, and a loop held past its heartbeat limit
fails /healthz, so the caller waits only a short while (``within``). The request used to be
given up with the wait, and the API server drops a request whose client went away: when every
write took longer than the wait, the acknowledgement was never applied however often it was
sent. `Patches` lets the request go on in a daemon thread for as long as its own timeout
(a daemon thread, so that it never holds up the process's exit); a later call for the same
annotations takes its answer, and a call for other ones sends them once it has ended, so that
the server applies them in the order they were given and a slow server gets one request at a
time from the pod.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Mapping


class Patches:
    """The last patch sent and its answer, possibly still to come."""

    def __init__(self, send: Callable[[dict[str, str]], None]) -> None:
        #: Sends one patch and returns once it is answered (raises what the answer says).
        self._send = send
        self._last: tuple[dict[str, str], concurrent.futures.Future[None]] | None = None

    @property
    def waiting(self) -> bool:
        """A patch was sent and its answer has not come yet."""
        return self._last is not None and not self._last[1].done()

    async def write(self, annotations: Mapping[str, str], *, within: float) -> bool:
        """True once these annotations are written, False while waiting (after ``within``
        seconds); raises the error of their answer.

        A patch still waiting is waited for first (within the same bound): if it carried these
        annotations its answer is this call's, else these are sent once it has ended.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        wanted = dict(annotations)
        if self._last is not None:
            sent, answer = self._last
            if not await _answered(answer, deadline - loop.time()):
                return False
            self._last = None
            if sent == wanted:
                answer.result()  # raises its error
                return True
        answer = concurrent.futures.Future()
        answer.set_running_or_notify_cancel()  # running: nothing can cancel the request
        self._last = (wanted, answer)
        threading.Thread(
            target=self._run, args=(wanted, answer), name="configmap-annotate", daemon=True
        ).start()
        if not await _answered(answer, deadline - loop.time()):
            return False
        self._last = None
        answer.result()
        return True

    def _run(self, annotations: dict[str, str], answer: concurrent.futures.Future[None]) -> None:
        try:
            self._send(annotations)
        except BaseException as e:
            answer.set_exception(e)
        else:
            answer.set_result(None)


async def _answered(answer: concurrent.futures.Future[None], seconds: float) -> bool:
    """Whether ``answer`` came within ``seconds``. Only its coming is awaited (its error
    stays with it for the caller to take, never left unretrieved on a waiter given up)."""
    if answer.done():
        return True
    loop = asyncio.get_running_loop()
    came = asyncio.Event()

    def wake(_: concurrent.futures.Future[None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(came.set)

    answer.add_done_callback(wake)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, seconds)):
            await came.wait()
    return answer.done()
