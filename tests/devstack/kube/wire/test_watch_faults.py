"""Watch faults seen by a watch client of the local API on 127.0.0.1: lag, a stall, 410 Gone
on resume and an early close, each on one resource while the others and writes go on.

Every wait is bounded; time is only ever checked as a lower bound (a lagged event cannot
come sooner than its lag), never as a speed.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI

#: The longest any step waits for something that must happen.
WAIT_S = 15.0
#: How early an event loop may run a timer (its clock resolution, with room).
TIMER_SLACK_S = 0.01

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def api() -> Iterator[LocalKubeAPI]:
    with LocalKubeAPI(crds_dir=None, bookmark_interval=0.2) as running:
        yield running


class Stream:
    """One watch stream's events, read line by line with a bound on each read."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self, *, within: float = WAIT_S) -> dict[str, Any] | None:
        """The next event, or None when the server ended the stream."""
        while True:
            line = await asyncio.wait_for(self.response.content.readline(), timeout=within)
            if not line:
                return None
            if line.strip():
                event: dict[str, Any] = json.loads(line)
                return event

    async def next_change(self, *, within: float = WAIT_S) -> dict[str, Any] | None:
        """The next event that is not a bookmark, or None at the end of the stream."""
        while (event := await self.next(within=within)) is not None:
            if event["type"] != "BOOKMARK":
                return event
        return None


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S * 3)) as s:
        yield s


async def _watch(
    session: aiohttp.ClientSession, api: LocalKubeAPI, plural: str, **params: str
) -> Stream:
    url = f"{api.url}/api/v1/namespaces/ns/{plural}"
    response = await session.get(
        url, params={"watch": "true", "allowWatchBookmarks": "true", **params}
    )
    assert response.status == 200
    return Stream(response)


def _version(api: LocalKubeAPI) -> str:
    """The current resourceVersion, as a LIST gives it (never "0": a watch from "0" starts
    with the objects there are, as a real server's does)."""
    with urllib.request.urlopen(f"{api.url}/api/v1/configmaps", timeout=WAIT_S) as answer:
        version: str = json.loads(answer.read())["metadata"]["resourceVersion"]
    return version


async def test_lag_delivers_events_late_while_writes_succeed_at_once(
    api: LocalKubeAPI, session: aiohttp.ClientSession
) -> None:
    api.create_object("v1/configmaps", {"metadata": {"name": "first"}}, namespace="ns")
    since = _version(api)
    configmaps = await _watch(session, api, "configmaps", resourceVersion=since)
    pods = await _watch(session, api, "pods", resourceVersion=since)
    lag_s = 2.0
    api.inject_watch_fault("lag", seconds=30.0, plural="configmaps", lag_s=lag_s)

    written = time.monotonic()
    created = api.create_object("v1/configmaps", {"metadata": {"name": "late"}}, namespace="ns")
    # The write is committed and readable at once.
    assert api.get_object("v1/configmaps", "late", namespace="ns") is not None
    api.create_object("v1/pods", {"metadata": {"name": "p"}}, namespace="ns")
    # The pod watch is not targeted: its event comes while the ConfigMap's is still held.
    pod_event = await pods.next_change()
    assert pod_event is not None
    assert pod_event["object"]["metadata"]["name"] == "p"
    assert time.monotonic() - written < lag_s, "the untargeted watch waited for the lag"

    bookmark_versions = []
    while (event := await configmaps.next()) is not None and event["type"] == "BOOKMARK":
        bookmark_versions.append(int(event["object"]["metadata"]["resourceVersion"]))
    assert event is not None
    assert event["object"]["metadata"]["name"] == "late"
    assert time.monotonic() - written >= lag_s
    # A lagging watch's bookmarks never claim a version it has not delivered.
    assert all(v < int(created["metadata"]["resourceVersion"]) for v in bookmark_versions)
    assert api.watch_fault_effects() == {"delayed": 1}


async def test_a_stalled_stream_sends_nothing_until_the_stall_ends(
    api: LocalKubeAPI, session: aiohttp.ClientSession
) -> None:
    stream = await _watch(session, api, "configmaps", resourceVersion=_version(api))
    # Alive first: a change of its kind elsewhere is news, which a bookmark tells.
    api.create_object("v1/configmaps", {"metadata": {"name": "elsewhere"}}, namespace="other")
    assert (await stream.next())["type"] == "BOOKMARK"  # type: ignore[index]
    stall_s = 2.0
    # Read before the fault starts its own clock: the stall ends stall_s after that.
    stalled = time.monotonic()
    api.inject_watch_fault("stall", seconds=stall_s, plural="configmaps")
    api.create_object("v1/configmaps", {"metadata": {"name": "held"}}, namespace="ns")
    # Open but silent: no bookmark although one is due every 0.2 s, and no event.
    with pytest.raises(TimeoutError):
        await stream.next(within=stall_s / 2)
    event = await stream.next()
    assert event is not None
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "held"
    # An event loop may run a timer up to its clock's resolution early.
    assert time.monotonic() - stalled >= stall_s - TIMER_SLACK_S


async def test_a_stall_lasts_until_the_client_gives_up(
    api: LocalKubeAPI, session: aiohttp.ClientSession
) -> None:
    stream = await _watch(session, api, "pods", resourceVersion=_version(api))
    api.inject_watch_fault("stall", seconds=60.0)  # every resource
    api.create_object("v1/pods", {"metadata": {"name": "p"}}, namespace="ns")
    with pytest.raises(TimeoutError):
        await stream.next(within=1.0)
    stream.response.close()
    api.clear_watch_faults()


async def test_a_resume_gets_410_gone_and_a_fresh_list_watches_again(
    api: LocalKubeAPI, session: aiohttp.ClientSession
) -> None:
    api.create_object("v1/configmaps", {"metadata": {"name": "old"}}, namespace="ns")
    old = _version(api)
    api.inject_watch_fault("gone", seconds=30.0, plural="configmaps")
    expired = await _watch(session, api, "configmaps", resourceVersion=old)
    event = await expired.next()
    assert event is not None
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert await expired.next() is None, "the stream goes on after its 410"
    assert api.watch_fault_effects() == {"expired": 1}
    # Not targeted: a pod watch resumes from the same version.
    pods = await _watch(session, api, "pods", resourceVersion=old)
    api.create_object("v1/pods", {"metadata": {"name": "p"}}, namespace="ns")
    pod_event = await pods.next_change()
    assert pod_event is not None
    assert pod_event["type"] == "ADDED"
    # A re-list's version is past the compaction point: watching from it works.
    async with session.get(f"{api.url}/api/v1/namespaces/ns/configmaps") as response:
        listed = (await response.json())["metadata"]["resourceVersion"]
    fresh = await _watch(session, api, "configmaps", resourceVersion=listed)
    api.create_object("v1/configmaps", {"metadata": {"name": "new"}}, namespace="ns")
    event = await fresh.next_change()
    assert event is not None
    assert event["object"]["metadata"]["name"] == "new"


async def test_an_early_close_ends_the_open_streams_of_its_resource(
    api: LocalKubeAPI, session: aiohttp.ClientSession
) -> None:
    since = _version(api)
    configmaps = await _watch(session, api, "configmaps", resourceVersion=since)
    pods = await _watch(session, api, "pods", resourceVersion=since)
    api.inject_watch_fault("close", seconds=30.0, plural="configmaps", close_after_s=0.0)
    assert await configmaps.next_change() is None  # ended by the server
    assert api.watch_fault_effects() == {"closed": 1}
    # The pod stream is still open: it gets the next pod event.
    api.create_object("v1/pods", {"metadata": {"name": "p"}}, namespace="ns")
    event = await pods.next_change()
    assert event is not None
    assert event["object"]["metadata"]["name"] == "p"


async def test_streams_opened_during_a_close_fault_live_only_their_time(
    api: LocalKubeAPI, session: aiohttp.ClientSession
) -> None:
    api.inject_watch_fault("close", seconds=30.0, close_after_s=1.0)
    opened = time.monotonic()
    stream = await _watch(session, api, "configmaps", resourceVersion=_version(api))
    assert await stream.next_change() is None
    assert time.monotonic() - opened >= 1.0
    api.clear_watch_faults()
    # Without the fault a stream stays open: it still gets an event written later.
    stream = await _watch(session, api, "configmaps", resourceVersion=_version(api))
    api.create_object("v1/configmaps", {"metadata": {"name": "after"}}, namespace="ns")
    event = await stream.next_change()
    assert event is not None
    assert event["object"]["metadata"]["name"] == "after"


async def test_the_write_record_has_what_a_stalled_watch_did_not_send(
    api: LocalKubeAPI, session: aiohttp.ClientSession
) -> None:
    api.record_writes("v1/configmaps")
    stream = await _watch(session, api, "configmaps", resourceVersion=_version(api))
    api.inject_watch_fault("stall", seconds=60.0, plural="configmaps")
    api.create_object("v1/configmaps", {"metadata": {"name": "a"}}, namespace="ns")
    api.patch_object("v1/configmaps", "a", {"data": {"k": "v"}}, namespace="ns")
    with pytest.raises(TimeoutError):
        await stream.next(within=0.5)
    writes = api.take_writes()
    assert [(e.type, e.body.get("data")) for e in writes.events] == [
        ("ADDED", None),
        ("MODIFIED", {"k": "v"}),
    ]
    assert writes.dropped == 0
    stream.response.close()
