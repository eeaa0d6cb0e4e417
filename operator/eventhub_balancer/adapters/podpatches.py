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
time from the pod. A wait whose end passed while the process was paused (`RESUMED_SETTLE_S`)
gives the request's thread a moment to take the answer first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
#: A wait whose end the loop saw this much late or more ended while the process was paused
#: (CPU throttling, a frozen container, SIGSTOP): the request's thread, paused with it, gets
#: this long to take the answer the API server gave meanwhile before the wait is given up.
RESUMED_SETTLE_S: Final = 0.5


def body(annotations: Mapping[str, str], *, own: tuple[str, bool] | None) -> tuple[Any, str]:
    """The patch that writes ``annotations``, and its content type.

    ``own``: the uid of the ConfigMap the pod last read as its own, and whether it had
    annotations (None: not read yet). A JSON patch then tests that uid first, so that the
    acknowledgement lands in that ConfigMap only: one created under the same name for another
    pod (a StatefulSet pod re-created while its predecessor's process still ran) fails the
    test (422) and keeps its own. A merge patch used to write the old process's generation
    and releases over the successor's.
    """
    if own is None:
        return {"metadata": {"annotations": dict(annotations)}}, MERGE_PATCH
    uid, annotated = own
    operations: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    if not annotated:
        operations.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    for key, value in annotations.items():
        pointer = key.replace("~", "~0").replace("/", "~1")  # RFC 6901
        operations.append({"op": "add", "path": f"/metadata/annotations/{pointer}", "value": value})
    return operations, JSON_PATCH


class Patches:
    """The last patch sent and its answer, possibly still to come."""

    def __init__(
        self,
        send: Callable[[dict[str, str]], str],
        *,
        spawn: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        #: Sends one patch and returns the resourceVersion its answer gave ("" for none) once
        #: it is answered (raises what the answer says).
        self._send = send
        #: Runs one request; a daemon thread unless a test runs it when it says.
        self._spawn = spawn or _daemon_thread
        self._last: tuple[dict[str, str], concurrent.futures.Future[str]] | None = None

    @property
    def waiting(self) -> bool:
        """A patch was sent and its answer has not come yet."""
        return self._last is not None and not self._last[1].done()

    async def write(self, annotations: Mapping[str, str], *, within: float) -> str | None:
        """The resourceVersion the object had once these annotations were written, None
        while waiting (after ``within`` seconds); raises the error of their answer.

        A patch still waiting is waited for first (within the same bound): if it carried these
        annotations its answer is this call's, else these are sent once it has ended.
        """
        wait = _Wait(within)
        wanted = dict(annotations)
        if self._last is not None:
            sent, answer = self._last
            if not await _answered(answer, wait):
                return None
            self._last = None
            if sent == wanted:
                return answer.result()  # or raises its error
        answer = concurrent.futures.Future()
        answer.set_running_or_notify_cancel()  # running: nothing can cancel the request
        self._last = (wanted, answer)
        self._spawn(lambda: self._run(wanted, answer))
        if not await _answered(answer, wait):
            return None
        self._last = None
        return answer.result()

    def _run(self, annotations: dict[str, str], answer: concurrent.futures.Future[str]) -> None:
        try:
            version = self._send(annotations)
        except BaseException as e:
            answer.set_exception(e)
        else:
            answer.set_result(version)


def _daemon_thread(request: Callable[[], None]) -> None:
    threading.Thread(target=request, name="configmap-annotate", daemon=True).start()


class _Wait:
    """The end of a caller's wait (the loop's clock), moved once past a pause.

    A process paused with a request in flight finds the end of its wait long past as soon as
    it runs again, and that timer fired ahead of the request's thread taking its answer: the
    pod reported that the API server had not answered, when it was the pod that had stopped.
    An end seen `RESUMED_SETTLE_S` late or more is moved to that long after the pause, once.
    """

    def __init__(self, within: float) -> None:
        self.end = asyncio.get_running_loop().time() + within
        self._settled = False

    def settle(self) -> bool:
        """Whether the wait goes on: its end was passed while the loop did not turn."""
        now = asyncio.get_running_loop().time()
        if self._settled or now - self.end < RESUMED_SETTLE_S:
            return False
        self._settled = True
        self.end = now + RESUMED_SETTLE_S
        return True


async def _answered(answer: concurrent.futures.Future[str], wait: _Wait) -> bool:
    """Whether ``answer`` came before the end of ``wait``. Only its coming is awaited (its
    error stays with it for the caller to take, never left unretrieved on a waiter given
    up)."""
    if answer.done():
        return True
    loop = asyncio.get_running_loop()
    came = asyncio.Event()

    def wake(_: concurrent.futures.Future[str]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(came.set)

    answer.add_done_callback(wake)
    while not answer.done():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(wait.end):
                await came.wait()
        if not answer.done() and not wait.settle():
            return False
    return True
