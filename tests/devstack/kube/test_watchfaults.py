"""Watch faults as rules (`watchfaults`), the write record, and the serving loop on fake time.

The rules take ``now``; the serving loop's own test runs its watch generator on looptime's
fake clock, so a 90 s lag takes no real time.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import (
    histories,
    resources,
    selectors,
    serving,
    storage,
    watchfaults,
)

CONFIGMAPS = next(r for r in resources.BUILTINS if r.plural == "configmaps")
PODS = next(r for r in resources.BUILTINS if r.plural == "pods")


def _fault(kind: str, **kwargs: Any) -> watchfaults.WatchFault:
    return watchfaults.make(kind, now=100.0, seconds=50.0, **kwargs)


def test_a_lagging_event_waits_its_lag_but_never_past_the_fault() -> None:
    lag = _fault("lag", plural="configmaps", lag_s=20.0)
    assert watchfaults.hold_until([lag], plural="configmaps", received=110.0) == 130.0
    assert watchfaults.hold_until([lag], plural="configmaps", received=140.0) == 150.0
    # Before and after the window, and on other resources, events go at once.
    assert watchfaults.hold_until([lag], plural="configmaps", received=99.0) == 99.0
    assert watchfaults.hold_until([lag], plural="configmaps", received=150.0) == 150.0
    assert watchfaults.hold_until([lag], plural="pods", received=110.0) == 110.0
    assert watchfaults.lagging([lag], plural="configmaps", now=120.0)
    assert not watchfaults.lagging([lag], plural="pods", now=120.0)


def test_a_stall_holds_everything_until_it_ends_and_targets_all_without_a_plural() -> None:
    stall = _fault("stall")
    for plural in ("pods", "configmaps", "eventhubconsumers"):
        assert watchfaults.hold_until([stall], plural=plural, received=101.0) == 150.0
        assert watchfaults.stalled([stall], plural=plural, now=149.9)
        assert not watchfaults.stalled([stall], plural=plural, now=150.0)


def test_gone_expires_only_resumes_from_before_the_fault_while_it_lasts() -> None:
    gone = _fault("gone", plural="pods", gone_below=42)
    assert watchfaults.gone([gone], plural="pods", since=41, now=120.0) == gone
    assert watchfaults.gone([gone], plural="pods", since=42, now=120.0) is None
    assert watchfaults.gone([gone], plural="pods", since=41, now=150.0) is None
    assert watchfaults.gone([gone], plural="configmaps", since=41, now=120.0) is None


def test_a_close_ends_streams_after_their_time_within_the_fault() -> None:
    close = _fault("close", plural="configmaps", close_after_s=5.0)
    # Open before the fault: ends 5 s into it; opened during it: 5 s after opening.
    assert watchfaults.closes_at([close], plural="configmaps", opened=10.0) == 105.0
    assert watchfaults.closes_at([close], plural="configmaps", opened=120.0) == 125.0
    # A stream that would outlive the fault's end by then is left alone.
    assert watchfaults.closes_at([close], plural="configmaps", opened=146.0) is None
    assert watchfaults.closes_at([close], plural="pods", opened=10.0) is None


def test_the_next_change_and_the_current_faults() -> None:
    lag = _fault("lag", plural="configmaps", lag_s=1.0)
    assert watchfaults.next_change([lag], plural="configmaps", now=90.0) == 100.0
    assert watchfaults.next_change([lag], plural="configmaps", now=100.0) == 150.0
    assert watchfaults.next_change([lag], plural="configmaps", now=150.0) is None
    assert watchfaults.current([lag], now=149.0) == (lag,)
    assert watchfaults.current([lag], now=150.0) == ()


@pytest.mark.parametrize(
    ("kind", "kwargs", "message"),
    [
        ("slow", {}, "unknown watch fault"),
        ("lag", {}, "lag_s above 0"),  # a lag of 0 is no fault
        ("lag", {"lag_s": -1.0}, "must not be negative"),
        ("close", {"close_after_s": -1.0}, "must not be negative"),
    ],
)
def test_a_malformed_fault_is_refused(kind: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        watchfaults.make(kind, now=0.0, seconds=1.0, **kwargs)
    with pytest.raises(ValueError, match="finite time"):
        watchfaults.make("stall", now=0.0, seconds=0.0)


# -- the write record


def test_the_write_record_keeps_every_write_of_the_recorded_kinds_until_taken() -> None:
    store = storage.Store()
    store.record_writes(CONFIGMAPS)
    began = time.time()
    store.create(CONFIGMAPS, namespace="ns", body={"metadata": {"name": "a"}})
    store.patch(
        CONFIGMAPS,
        namespace="ns",
        name="a",
        patch={"data": {"k": "v"}},
        patch_type="merge",
    )
    store.create(PODS, namespace="ns", body={"metadata": {"name": "p"}})
    store.delete(CONFIGMAPS, namespace="ns", name="a")
    taken = store.take_writes()
    assert [(e.type, e.body["metadata"]["name"]) for e in taken.events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    assert taken.events[1].body["data"] == {"k": "v"}
    assert taken.dropped == 0
    # Each with its commit time, on the wall clock the benchmarks' other records use.
    times = [e.committed_at for e in taken.events]
    assert began <= times[0] <= times[1] <= times[2] <= time.time()
    assert store.take_writes() == histories.Writes(events=(), dropped=0)


def test_a_full_write_record_counts_what_it_dropped() -> None:
    store = storage.Store(write_record_size=3)
    store.record_writes(CONFIGMAPS)
    for i in range(5):
        store.create(CONFIGMAPS, namespace="ns", body={"metadata": {"name": f"c{i}"}})
    taken = store.take_writes()
    assert [e.body["metadata"]["name"] for e in taken.events] == ["c2", "c3", "c4"]
    assert taken.dropped == 2
    assert store.take_writes().dropped == 0


def test_advancing_the_version_changes_no_object() -> None:
    store = storage.Store()
    before = int(store.resource_version)
    assert store.advance_version() == before + 1
    assert store.resource_version == str(before + 1)


# -- the serving loop on fake time


def _request(**params: str) -> Any:
    return types.SimpleNamespace(params={"watch": "true", **params}, headers={}, _raw_request=None)


async def _next_event(events: AsyncIterator[Any]) -> dict[str, Any]:
    """The next event of a watch (the first item, ``b""``, only sends the headers)."""
    while True:
        item = await anext(events)
        if isinstance(item, dict):
            return item


@pytest.mark.looptime
async def test_a_lag_of_90_seconds_delays_each_event_by_90_seconds() -> None:
    store = storage.Store()
    handler = serving.LocalKubeHandler(store=store, bookmark_interval=30.0)
    loop = asyncio.get_running_loop()
    since = store.resource_version
    events = handler._watch(
        _request(resourceVersion=since, allowWatchBookmarks="true"),
        CONFIGMAPS,
        "ns",
        selectors.Selector(),
    )
    assert await anext(events) == b""
    handler.inject_watch_fault("lag", seconds=300.0, plural="configmaps", lag_s=90.0)
    written_at = loop.time()
    created = store.create(CONFIGMAPS, namespace="ns", body={"metadata": {"name": "a"}})
    version = int(created["metadata"]["resourceVersion"])
    # The write is committed at once; the watch sends bookmarks meanwhile (every 30 s),
    # never past what it delivered, then the event, 90 s late.
    bookmarks = []
    while (first := await _next_event(events))["type"] == "BOOKMARK":
        bookmarks.append(int(first["object"]["metadata"]["resourceVersion"]))
    assert len(bookmarks) >= 2
    assert max(bookmarks) < version
    assert first["type"] == "ADDED"
    assert first["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert loop.time() - written_at == pytest.approx(90.0, abs=0.01)
    # A bookmark after it says that event's version, not the store's newer one.
    store.create(CONFIGMAPS, namespace="ns", body={"metadata": {"name": "b"}})
    bookmark = await _next_event(events)
    assert bookmark["type"] == "BOOKMARK"
    assert (
        bookmark["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    )
    await events.aclose()  # type: ignore[attr-defined]  # an async generator


@pytest.mark.looptime
async def test_a_stall_sends_nothing_until_it_ends_then_catches_up() -> None:
    store = storage.Store()
    handler = serving.LocalKubeHandler(store=store, bookmark_interval=5.0)
    loop = asyncio.get_running_loop()
    events = handler._watch(
        _request(resourceVersion=store.resource_version, allowWatchBookmarks="true"),
        PODS,
        "ns",
        selectors.Selector(),
    )
    assert await anext(events) == b""
    handler.inject_watch_fault("stall", seconds=120.0, plural="pods")
    began = loop.time()
    store.create(PODS, namespace="ns", body={"metadata": {"name": "p"}})
    first = await _next_event(events)
    # No bookmark in 120 s although one is due every 5 s: the first thing sent is the event.
    assert first["type"] == "ADDED"
    assert loop.time() - began == pytest.approx(120.0, abs=0.01)
    await events.aclose()  # type: ignore[attr-defined]  # an async generator


@pytest.mark.looptime
async def test_clearing_the_faults_sends_what_was_held_at_once() -> None:
    store = storage.Store()
    handler = serving.LocalKubeHandler(store=store)
    loop = asyncio.get_running_loop()
    events = handler._watch(
        _request(resourceVersion=store.resource_version),
        CONFIGMAPS,
        "ns",
        selectors.Selector(),
    )
    assert await anext(events) == b""
    handler.inject_watch_fault("lag", seconds=600.0, lag_s=500.0)
    began = loop.time()
    store.create(CONFIGMAPS, namespace="ns", body={"metadata": {"name": "a"}})
    loop.call_later(7.0, handler.clear_watch_faults)
    first = await _next_event(events)
    assert first["type"] == "ADDED"
    assert loop.time() - began == pytest.approx(7.0, abs=0.01)
    await events.aclose()  # type: ignore[attr-defined]  # an async generator
