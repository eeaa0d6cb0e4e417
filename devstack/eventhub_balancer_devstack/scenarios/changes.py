"""When to look again: every change of a namespace's Pods and ConfigMaps, as a watch sees it.

A step is balanced the moment the last write that balances it lands: a pod applies its
assignment (its ConfigMap's annotations), a pod turns Ready (its status), a pod goes. The
runner used to look every `runs.POLL_S` (0.1 s) and add, on average, half of that to every
figure, up to all of it. `NamespaceChanges` watches the namespace's Pods and ConfigMaps and
wakes the runner at each change, so that it looks right after the write; the poll stays as
the bound, for what no watch shows (the SDK's ownership blobs, a process's /readyz).

The watches only wake the runner: what it judges is still what it reads afterwards. A watch
that fails is started again after a pause, and meanwhile the poll goes on alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from eventhub_balancer_devstack.realkube import podwatches

logger = logging.getLogger(__name__)

#: Seconds one watch request lasts before it is made again (and how soon a stop is seen).
WATCH_S = 5
#: The pause before a failed watch is made again.
RETRY_S = 0.5


class NamespaceChanges:
    """Two watch threads (Pods, ConfigMaps) that set one flag on every event they see."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._namespace = namespace
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open: set[Any] = set()  # the watch responses being read, closed by `stop`

    def start(self) -> None:
        for what, lister in (
            ("pods", self._core.list_namespaced_pod),
            ("configmaps", self._core.list_namespaced_config_map),
        ):
            thread = threading.Thread(
                target=self._follow, args=(lister,), name=f"changes-{what}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        for response in list(self._open):
            podwatches.end_read(response)  # unblocks the read that waits for the next event
        for thread in self._threads:
            thread.join(timeout=WATCH_S + 2)
        self._threads.clear()

    def wait(self, timeout: float) -> bool:
        """Until a change since the last wait, or ``timeout``; whether there was one."""
        changed = self._changed.wait(timeout)
        self._changed.clear()
        return changed

    def _follow(self, lister: Callable[..., Any]) -> None:
        while not self._stop.is_set():
            try:
                # The events are not parsed: any of them only says "look again". No
                # resourceVersion: a (re)start sees every object once, one more look.
                response = lister(
                    self._namespace,
                    watch=True,
                    timeout_seconds=WATCH_S,
                    _preload_content=False,
                    _request_timeout=WATCH_S + 5,
                )
                self._open.add(response)
                try:
                    for _ in response.stream(decode_content=False):
                        self._changed.set()
                        if self._stop.is_set():
                            break
                finally:
                    self._open.discard(response)
                    response.release_conn()
            except Exception as e:  # the poll goes on, and the watch is made again
                logger.debug("watch of %s failed (%s); again in %.1f s", lister, e, RETRY_S)
                self._stop.wait(RETRY_S)
