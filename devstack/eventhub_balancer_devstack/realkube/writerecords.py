"""The write record of a real API server: every committed change of the kinds asked for.

The local API keeps its write record in its store (`kube.histories.WriteRecord`), because its
watches may be faulted on purpose. A real API server's watch is not faulted here, and it is
the one ordered view of what etcd committed, so the record is a watch per kind, opened when
recording starts and resumed from the last resourceVersion (a fresh list on 410 Gone, with
what the list shows changed recorded as such). ``committed_at`` is when the change reached
this process: a few milliseconds after the commit on this machine, which is what the
benchmarks' stage timings can tell apart.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack.kube import histories
from eventhub_balancer_devstack.realkube import podwatches, resourcecalls

logger = logging.getLogger(__name__)

#: Each watch request ends after this long and is resumed. `stop` ends the read in flight at
#: once (`podwatches.end_read`); this bounds its wait where the read cannot be ended.
WATCH_SECONDS = 5

#: The pause before a failed watch is tried again.
RETRY_S = 0.5

Key = tuple[str, str]


class _KindRecorder:
    def __init__(
        self, api: resourcecalls.ResourceCalls, resource: str, sink: WatchWriteRecord
    ) -> None:
        self._api = api
        self._resource = resource
        group, _, plural = resourcecalls.split(resource)
        self._storage_key = (group, plural)
        self._sink = sink
        self._bodies: dict[Key, dict[str, Any]] = {}
        self._stop = threading.Event()
        #: the watch response being read, ended by `halt`
        self._response: urllib3.BaseHTTPResponse | None = None
        self._resource_version = self._list(record=False)
        self._thread = threading.Thread(
            target=self._run, name=f"write-record {resource}", daemon=True
        )
        self._thread.start()

    def _key(self, body: dict[str, Any]) -> Key:
        metadata = body.get("metadata") or {}
        return (str(metadata.get("namespace") or ""), str(metadata.get("name")))

    def _list(self, *, record: bool) -> str:
        answer = self._api.call("GET", resourcecalls.path(self._resource))
        seen: dict[Key, dict[str, Any]] = {}
        for item in answer.get("items") or []:
            seen[self._key(item)] = item
        if record:
            # After a 410 the changes in between are lost to a watch; what the list shows
            # changed is recorded, so the record misses states, never objects.
            for key, body in seen.items():
                previous = self._bodies.get(key)
                if previous is None:
                    self._emit("ADDED", body, None)
                elif previous["metadata"].get("resourceVersion") != body["metadata"].get(
                    "resourceVersion"
                ):
                    self._emit("MODIFIED", body, previous)
            for key, body in self._bodies.items():
                if key not in seen:
                    self._emit("DELETED", body, body)
        self._bodies = seen
        return str((answer.get("metadata") or {}).get("resourceVersion") or "0")

    def _emit(self, kind: str, body: dict[str, Any], previous: dict[str, Any] | None) -> None:
        version = int((body.get("metadata") or {}).get("resourceVersion") or 0)
        self._sink.add(
            histories.WatchEvent(
                type=kind,  # type: ignore[arg-type]
                storage_key=self._storage_key,
                body=body,
                previous=previous,
                resource_version=version,
                committed_at=time.time(),
            )
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except ApiException as e:
                if e.status == 410:
                    self._resource_version = self._list(record=True)
                    continue
                logger.warning("write record of %s: %s; resuming", self._resource, e.reason)
                self._stop.wait(RETRY_S)
            except Exception as e:  # a dropped connection: resume from the last version
                if not self._stop.is_set():
                    logger.debug("write record of %s: %r; resuming", self._resource, e)
                    self._stop.wait(RETRY_S)

    def _watch(self) -> None:
        response = self._api.open(
            "GET",
            resourcecalls.path(self._resource),
            query={
                "watch": "true",
                "resourceVersion": self._resource_version,
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
            for line in podwatches.lines(response):
                if self._stop.is_set():
                    return
                event = json.loads(line)
                kind, body = event["type"], event["object"]
                if kind == "ERROR":
                    code = int(body.get("code") or 500)
                    raise ApiException(status=code, reason=body.get("message"))
                self._resource_version = str(body["metadata"]["resourceVersion"])
                if kind == "BOOKMARK":
                    continue
                key = self._key(body)
                previous = self._bodies.get(key)
                if kind == "DELETED":
                    self._bodies.pop(key, None)
                else:
                    self._bodies[key] = body
                self._emit(kind, body, previous)
        finally:
            self._response = None  # a halt after this has no read to end
            response.close()

    def halt(self) -> None:
        self._stop.set()
        podwatches.end_read(self._response)

    def join(self) -> None:
        self._thread.join(timeout=WATCH_SECONDS + 15)


class WatchWriteRecord:
    """Every committed change of the recorded kinds, kept until taken; bounded like the
    local one (`histories.WRITE_RECORD_SIZE`)."""

    def __init__(
        self, api: resourcecalls.ResourceCalls, *, size: int = histories.WRITE_RECORD_SIZE
    ):
        self._api = api
        self._lock = threading.Lock()
        self._events: collections.deque[histories.WatchEvent] = collections.deque(maxlen=size)
        self._dropped = 0
        self._kinds: dict[str, _KindRecorder] = {}

    def record(self, resource: str) -> None:
        if resource not in self._kinds:
            self._kinds[resource] = _KindRecorder(self._api, resource, self)

    def add(self, event: histories.WatchEvent) -> None:
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self._dropped += 1
            self._events.append(event)

    def take(self) -> histories.Writes:
        with self._lock:
            taken = histories.Writes(events=tuple(self._events), dropped=self._dropped)
            self._events.clear()
            self._dropped = 0
        return taken

    def stop(self) -> None:
        """Stop every kind's watch: all are halted first, so that they end together."""
        kinds, self._kinds = list(self._kinds.values()), {}
        for kind in kinds:
            kind.halt()
        for kind in kinds:
            kind.join()
