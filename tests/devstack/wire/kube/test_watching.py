"""Watch details at the HTTP level: initial events, bookmarks, 410 Gone, named watches."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest

from eventhub_balancer_devstack.kube import resources, serving, storage

CONFIGMAPS = "/api/v1/namespaces/ns/configmaps"


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, storage.Store]]:
    store = storage.Store(history_size=5)
    handler = serving.LocalKubeHandler(store=store, bookmark_interval=0.2)
    async with handler, kmock.Server(handler, host="127.0.0.1") as srv:
        yield f"http://{srv.host}:{srv.port}", store


async def _watch(url: str, params: dict[str, str]) -> list[dict[str, Any]]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, params={"watch": "true", **params}) as response,
    ):
        assert response.status == 200
        return [json.loads(line) async for line in response.content if line.strip()]


def storage_spec(store: storage.Store) -> resources.ResourceSpec:
    return store.resolve(group="", version="v1", plural="configmaps")


async def _create(base: str, name: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(base + CONFIGMAPS, json={"metadata": {"name": name}}) as response,
    ):
        assert response.status == 201
        body: dict[str, Any] = await response.json()
        return body


async def test_initial_events_end_with_a_bookmark(server: tuple[str, storage.Store]) -> None:
    base, _ = server
    await _create(base, "a")
    params = {"sendInitialEvents": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "1"}
    events = await _watch(base + CONFIGMAPS, params)
    assert (events[0]["type"], events[0]["object"]["metadata"]["name"]) == ("ADDED", "a")
    end = events[1]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    # An idle watch gets no more bookmarks than that: as on a real server, one goes out when
    # its kind's version moves on, not on a timer alone.
    assert events[2:] == []


async def test_a_bookmark_tells_of_changes_the_watch_does_not_select(
    server: tuple[str, storage.Store],
) -> None:
    base, store = server
    created = await _create(base, "a")
    elsewhere = {"metadata": {"name": "b"}}

    async def write_elsewhere() -> None:
        await asyncio.sleep(0.3)
        store.create(storage_spec(store), namespace="other", body=elsewhere)

    writing = asyncio.create_task(write_elsewhere())
    params = {
        "resourceVersion": created["metadata"]["resourceVersion"],
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "1",
    }
    events = await _watch(base + CONFIGMAPS, params)
    await writing
    assert [e["type"] for e in events] == ["BOOKMARK"]
    version = int(events[0]["object"]["metadata"]["resourceVersion"])
    assert version == int(store.resource_version)  # the write in the other namespace


async def test_compacted_versions_are_gone(server: tuple[str, storage.Store]) -> None:
    base, _ = server
    first = await _create(base, "c0")
    for i in range(1, 8):
        await _create(base, f"c{i}")
    since = first["metadata"]["resourceVersion"]
    events = await _watch(base + CONFIGMAPS, {"resourceVersion": since, "timeoutSeconds": "1"})
    assert [e["type"] for e in events] == ["ERROR"]
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")


async def test_resumed_watch_gets_only_later_changes(server: tuple[str, storage.Store]) -> None:
    base, _ = server
    await _create(base, "old")
    since = (await _create(base, "mid"))["metadata"]["resourceVersion"]
    await _create(base, "new")
    events = await _watch(base + CONFIGMAPS, {"resourceVersion": since, "timeoutSeconds": "1"})
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "new")]


async def test_errors_are_status_bodies(server: tuple[str, storage.Store]) -> None:
    base, _ = server
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/api/v1/things") as response:
            assert response.status == 404
            assert (await response.json())["kind"] == "Status"
        # A group nobody serves: a real server's mux answers in plain text, not a Status.
        async with session.get(base + "/apis/nope.dev/v1/things") as response:
            assert response.status == 404
            assert await response.text() == "404 page not found\n"
        async with session.get(base + CONFIGMAPS, params={"labelSelector": "a in (b"}) as response:
            assert response.status == 400
            assert (await response.json())["reason"] == "BadRequest"
        await _create(base, "x")
        headers = {"Content-Type": "application/apply-patch+yaml"}
        async with session.patch(base + CONFIGMAPS + "/x", data="{}", headers=headers) as response:
            assert response.status == 415


async def test_a_watch_without_bookmarks_keeps_delivering_past_the_bookmark_interval(
    server: tuple[str, storage.Store],
) -> None:
    base, _ = server
    created = await _create(base, "late")
    params = {"timeoutSeconds": "2", "resourceVersion": created["metadata"]["resourceVersion"]}

    async def patch_later() -> None:
        # Well past the 0.2 s bookmark interval, which must not silence this watch.
        await asyncio.sleep(1.0)
        async with (
            aiohttp.ClientSession() as session,
            session.patch(
                base + CONFIGMAPS + "/late",
                json={"data": {"n": "1"}},
                headers={"Content-Type": "application/merge-patch+json"},
            ) as response,
        ):
            assert response.status == 200

    events, _ = await asyncio.gather(_watch(base + CONFIGMAPS, params), patch_later())
    assert [(e["type"], e["object"].get("data")) for e in events] == [("MODIFIED", {"n": "1"})]
