"""A pod watch for the local node: every pod of the cluster, listed then watched, in a thread.

The node must see each pod the moment it is created (to bind it), bound to it (to run it) and
deleted (to stop it). It lists once, then watches from the list's resourceVersion with
bookmarks, resumes after each timeout from the last version it saw, and lists again after a
410 Gone, handing each change to the node's callback in order.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack.realkube import resourcecalls

logger = logging.getLogger(__name__)

#: Each watch request ends after this long and is resumed. `stop` ends the read in flight at
#: once (`end_read`); this bounds its wait where the read cannot be ended.
WATCH_SECONDS = 5

#: The pause before a failed list or watch is tried again.
RETRY_S = 0.5

Change = Callable[[str, dict[str, Any]], None]


def end_read(response: urllib3.BaseHTTPResponse | None) -> None:
    """End, from another thread, a read of ``response`` that waits for the server: its socket
    is shut for reading, so the read returns now instead of at the watch's timeout (each
    stopped watch cost up to `WATCH_SECONDS`, in every test's teardown). urllib3 before 2.3
    has no way to do this: there the read ends at the timeout, as before."""
    shutdown = getattr(response, "shutdown", None)
    if shutdown is not None:
        with contextlib.suppress(OSError):
            shutdown()


def lines(response: urllib3.BaseHTTPResponse) -> Iterator[str]:
    """A watch stream's JSON lines as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line.decode("utf-8")


class PodWatch:
    """Calls ``on_change(type, pod)`` for every pod change (``SYNC`` for each listed pod)."""

    def __init__(
        self, calls: resourcecalls.ResourceCalls, on_change: Change, *, name: str = "pods"
    ) -> None:
        self._calls = calls
        self._on_change = on_change
        self._stop = threading.Event()
        self._version = ""
        #: the watch response being read, ended by `stop`
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread = threading.Thread(target=self._run, name=f"local-node {name}", daemon=True)

    def start(self) -> None:
        self._version = self._list()
        self._thread.start()

    def stop(self) -> None:
        self.halt()
        self.join()

    def halt(self) -> None:
        """Tell the watch to stop, and end the read it waits in; `join` waits for it. Halting
        several watches before joining any stops them all at once."""
        self._stop.set()
        end_read(self._response)

    def join(self) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout=WATCH_SECONDS + 15)

    def _list(self) -> str:
        answer = self._calls.call("GET", "/api/v1/pods")
        for pod in answer.get("items") or []:
            self._on_change("SYNC", pod)
        return str(answer["metadata"]["resourceVersion"])

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except ApiException as e:
                if e.status == 410:
                    try:
                        self._version = self._list()
                    except Exception as listing:
                        logger.warning("pod list failed: %r; retrying", listing)
                        self._stop.wait(RETRY_S)
                    continue
                logger.warning("pod watch failed: %s; resuming", e.reason)
                self._stop.wait(RETRY_S)
            except Exception as e:
                if not self._stop.is_set():
                    logger.debug("pod watch ended: %r; resuming", e)
                    self._stop.wait(RETRY_S)

    def _watch(self) -> None:
        response = self._calls.open(
            "GET",
            "/api/v1/pods",
            query={
                "watch": "true",
                "resourceVersion": self._version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(WATCH_SECONDS),
            },
            timeout=urllib3.Timeout(connect=5, read=WATCH_SECONDS + 10),
            stream=True,
        )
        self._response = response
        try:
            if self._stop.is_set():  # halted before the response was there to end
                return
            for line in lines(response):
                if self._stop.is_set():
                    return
                event = json.loads(line)
                kind, body = event["type"], event["object"]
                if kind == "ERROR":
                    raise ApiException(
                        status=int(body.get("code") or 500), reason=body.get("message")
                    )
                self._version = str(body["metadata"]["resourceVersion"])
                if kind != "BOOKMARK":
                    self._on_change(kind, body)
        finally:
            self._response = None
            if self._stop.is_set():
                response.close()  # its socket may be shut: never back to the pool
            else:
                response.release_conn()
