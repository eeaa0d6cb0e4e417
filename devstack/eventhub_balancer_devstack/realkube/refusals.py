"""The pods the local node could not start, and when it tries them again.

A kubelet that cannot make a container's configuration (its Secret not there yet, as when a
GitOps tool or an external-secrets operator writes it after the Deployment) leaves the pod
waiting with ``CreateContainerConfigError`` and tries again at its next sync of the pod: the
pod starts once the Secret is there. A spec the local node cannot run as written (a
``command``, an init container) is refused for good. `LocalNode` keeps both here; its probe
loop asks for the pods due again.
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: How long a pod refused for a reason that may pass waits before the node tries it again (a
#: kubelet syncs a pod about every 10 s; a local stack wants the start sooner).
RETRY_S = 2.0


class Refusals:
    """Pods (by uid) the node refused: for good, or until a retry is due."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._for_good: set[str] = set()
        #: uid -> (the pod's latest body, when to try it again on the monotonic clock)
        self._waiting: dict[str, tuple[dict[str, Any], float]] = {}
        #: uid -> why it was refused last: a retry refused for the same reason is not news
        self._said: dict[str, str] = {}

    def __contains__(self, uid: object) -> bool:
        with self._lock:
            return uid in self._for_good or uid in self._waiting

    def refuse(self, pod: dict[str, Any], *, why: str, again: bool) -> bool:
        """``pod`` could not start, for ``why``; ``again``: try it again after `RETRY_S`.
        True when that is news (the first refusal, or another reason than the last): the node
        says it and writes the pod's status then, not at every retry."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            if again:
                self._waiting[uid] = (pod, time.monotonic() + RETRY_S)
            else:
                self._for_good.add(uid)
            news = self._said.get(uid) != why
            self._said[uid] = why
            return news

    def seen(self, pod: dict[str, Any]) -> None:
        """The pod's newer body, for a retry to start from."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            if uid in self._waiting:
                self._waiting[uid] = (pod, self._waiting[uid][1])

    def forget(self, uid: str) -> None:
        with self._lock:
            self._for_good.discard(uid)
            self._waiting.pop(uid, None)
            self._said.pop(uid, None)

    def due(self) -> list[dict[str, Any]]:
        """The pods whose retry is due, taken off the list (a retry refused puts one back)."""
        now = time.monotonic()
        with self._lock:
            ready = [uid for uid, (_, at) in self._waiting.items() if at <= now]
            return [self._waiting.pop(uid)[0] for uid in ready]
