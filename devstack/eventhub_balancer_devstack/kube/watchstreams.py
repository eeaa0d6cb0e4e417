"""Watch streams (`serving.LocalKubeHandler`'s mixin): bookmarks, timeouts, resumption.

A watch is an async generator of JSON events over the store's change feed (`storage`,
`histories`); the watch faults in force (`watchfaults`, begun and ended by the handler) may
hold its events back, close it early or expire its resumption point (410).
"""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

from eventhub_balancer_devstack.kube import (
    failures,
    histories,
    listings,
    resources,
    storage,
    tables,
    watchfaults,
)
from eventhub_balancer_devstack.kube import selectors as selecting

#: How often an idle watch checks that its client is still connected (aiohttp does not cancel
#: handlers of closed connections).
DISCONNECT_POLL = 2.0

#: The shortest wait of an idle watch: a moment due now is handled at the top of its loop.
MIN_WAIT = 0.001

#: A real server sends a watch's last bookmark this long before its timeout ends it, so that
#: the client resumes from as new a version as it can.
BOOKMARK_BEFORE_TIMEOUT = 2.0


def _next_bookmark(now: float, interval: float, deadline: float | None) -> float:
    """When a watch may next send a bookmark: after the interval, or just before its end."""
    due = now + interval
    if deadline is not None and deadline - BOOKMARK_BEFORE_TIMEOUT > now:
        due = min(due, deadline - BOOKMARK_BEFORE_TIMEOUT)
    return due


class WatchStreams:
    """The watches of `serving.LocalKubeHandler`, over its store, bookmark interval and faults."""

    __slots__ = ()

    store: storage.Store
    bookmark_interval: float
    watch_faults: tuple[watchfaults.WatchFault, ...]
    watch_fault_effects: collections.Counter[str]

    async def _watch_maybe_table(
        self,
        request: Any,
        spec: resources.ResourceSpec,
        namespace: str | None,
        selector: selecting.Selector,
    ) -> AsyncIterator[Any]:
        """A watch whose objects are one-row Tables when asked (``kubectl get -w``)."""
        events = self._watch(request, spec, namespace, selector)
        if not tables.wants_table(str(request.headers.get("Accept", ""))):
            async for event in events:
                yield event
            return
        first = True
        async for event in events:
            if isinstance(event, dict) and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                table = listings.table(self.store, spec, [event["object"]], request.params)
                if not first:  # as a real server: the columns come with the first event only
                    table["columnDefinitions"] = []
                first = False
                event = {"type": event["type"], "object": table}
            yield event

    async def _watch(
        self,
        request: Any,
        spec: resources.ResourceSpec,
        namespace: str | None,
        selector: selecting.Selector,
    ) -> AsyncIterator[Any]:
        params: Mapping[str, str] = request.params
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
        since_text = params.get("resourceVersion") or ""
        initial_events = params.get("sendInitialEvents") in ("true", "1") or (
            # A watch from no version (or "0") starts with what there is, as one that asks for
            # initial events (a real server defaults it so), bookmark at the end included.
            since_text in ("", "0") and "sendInitialEvents" not in params
        )
        try:
            since = int(since_text) if since_text else 0
            timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        except ValueError as e:
            raise failures.bad_request(f"invalid resourceVersion or timeoutSeconds: {e}") from e

        loop = asyncio.get_running_loop()
        opened = loop.time()
        plural = spec.plural
        if since and not initial_events:
            expiring = watchfaults.gone(self.watch_faults, plural=plural, since=since, now=opened)
            if expiring is not None:
                self.watch_fault_effects["expired"] += 1
                yield b""
                status = failures.expired(
                    f"too old resource version: {since} ({expiring.gone_below})"
                ).as_status()
                yield {"type": "ERROR", "object": status}
                return

        # Subscribe and snapshot in one step (no await between): nothing can fall in between.
        subscription = self.store.subscribe(spec)
        try:
            #: (when the watch received it, its resource version, the event) in stream order;
            #: without faults each goes out at once, with `watchfaults` it may wait.
            held: collections.deque[tuple[float, int, dict[str, Any]]] = collections.deque()
            delivered = since  # the version of the last event sent (what a bookmark may say)
            announced = since  # the newest version the client was told of, by event or bookmark
            if since == 0 or initial_events:
                initial = self.store.select(spec, namespace=namespace, selector=selector)
                seen = int(self.store.resource_version)
                announced = seen  # the snapshot is of that version: newer news only after it
                for body in initial:
                    version = int(body["metadata"].get("resourceVersion") or 0)
                    held.append((opened, version, {"type": "ADDED", "object": body}))
                if initial_events and bookmarks:
                    held.append((opened, seen, self._bookmark(spec, end_of_initial_events=True)))
            else:
                seen = since
                for event in self.store.changes_since(spec, since):
                    # As a real server's watch cache: the history replayed counts as told,
                    # the changes this watch does not select included.
                    announced = max(announced, event.resource_version)
                    rendered = self._for_watcher(event, spec, namespace, selector)
                    if rendered is not None:
                        held.append((opened, event.resource_version, rendered))
            yield b""  # send the headers now: clients wait for them before reading events

            deadline = opened + timeout if timeout is not None else None
            next_bookmark = _next_bookmark(opened, self.bookmark_interval, deadline)
            raw_request = request._raw_request
            while True:
                faults = self.watch_faults
                while held and (
                    watchfaults.hold_until(faults, plural=plural, received=held[0][0])
                    <= loop.time()
                ):
                    _, version, item = held.popleft()
                    delivered = max(delivered, version)
                    announced = max(announced, version)
                    yield item
                now = loop.time()
                if deadline is not None and now >= deadline:
                    return
                closes = watchfaults.closes_at(faults, plural=plural, opened=opened)
                if closes is not None and now >= closes:
                    self.watch_fault_effects["closed"] += 1
                    return
                if raw_request is not None and (
                    raw_request.transport is None or raw_request.transport.is_closing()
                ):
                    return
                if now >= next_bookmark:
                    next_bookmark = _next_bookmark(now, self.bookmark_interval, deadline)
                    if bookmarks and not watchfaults.stalled(faults, plural=plural, now=now):
                        behind = held or watchfaults.lagging(faults, plural=plural, now=now)
                        latest = self.store.latest_version(spec)
                        if behind and delivered:
                            # A lagging watch (a fault) keeps its stream alive with bookmarks
                            # that never claim a version it has not delivered.
                            yield self._bookmark(spec, resource_version=delivered)
                        elif not behind and latest > announced:
                            # A prompt one tells of its kind's changes it did not select; as
                            # on a real server, only when that is news.
                            announced = latest
                            yield self._bookmark(spec, resource_version=latest)
                wake = [next_bookmark, now + DISCONNECT_POLL]
                for moment in (
                    deadline,
                    closes,
                    watchfaults.next_change(faults, plural=plural, now=now),
                    watchfaults.hold_until(faults, plural=plural, received=held[0][0])
                    if held
                    else None,
                ):
                    if moment is not None:
                        wake.append(moment)
                # Never 0: wait_for(..., 0) cancels the get before it can take a change.
                wait = max(MIN_WAIT, min(wake) - loop.time())
                change: histories.WatchEvent | histories.Signal | None
                if subscription.queue.empty():
                    try:
                        change = await asyncio.wait_for(subscription.queue.get(), timeout=wait)
                    except TimeoutError:
                        continue
                else:
                    change = subscription.queue.get_nowait()
                if change is None:
                    return  # the server is stopping
                if isinstance(change, histories.Signal) or change.resource_version <= seen:
                    continue
                rendered = self._for_watcher(change, spec, namespace, selector)
                if rendered is not None:
                    received = loop.time()
                    if (
                        watchfaults.hold_until(self.watch_faults, plural=plural, received=received)
                        > received
                    ):
                        self.watch_fault_effects["delayed"] += 1
                    held.append((received, change.resource_version, rendered))
        except failures.APIFailure as e:
            if e.code != 410:
                raise
            yield b""
            yield {"type": "ERROR", "object": e.as_status()}
        finally:
            self.store.unsubscribe(subscription)

    def _bookmark(
        self,
        spec: resources.ResourceSpec,
        *,
        end_of_initial_events: bool = False,
        resource_version: int | None = None,
    ) -> dict[str, Any]:
        version = self.store.resource_version if resource_version is None else resource_version
        metadata: dict[str, Any] = {"resourceVersion": str(version)}
        if end_of_initial_events:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {
            "type": "BOOKMARK",
            "object": {"kind": spec.kind, "apiVersion": spec.api_version, "metadata": metadata},
        }

    def _for_watcher(
        self,
        event: histories.WatchEvent,
        spec: resources.ResourceSpec,
        namespace: str | None,
        selector: selecting.Selector,
    ) -> dict[str, Any] | None:
        """The event as this watch sees it: objects entering or leaving its selection."""
        if namespace is not None and event.body["metadata"].get("namespace") != namespace:
            return None
        matches_now = selector.matches(event.body)
        matched_before = event.previous is not None and selector.matches(event.previous)
        event_type: str = event.type
        body = event.body
        if event.type == "MODIFIED":
            if matches_now and not matched_before:
                event_type = "ADDED"
            elif matched_before and not matches_now and event.previous is not None:
                # As kube-apiserver does: the object leaves with what it was while it matched
                # (the labels that put it in the selection), at the change's version.
                event_type = "DELETED"
                body = copy.deepcopy(dict(event.previous))
                body["metadata"]["resourceVersion"] = str(event.resource_version)
            elif not matches_now:
                return None
        elif event.type == "DELETED":
            if not (matches_now or matched_before):
                return None
        elif not matches_now:
            return None
        return {"type": event_type, "object": self.store.render(spec, body)}
