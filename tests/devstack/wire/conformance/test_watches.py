"""The local API against a real kube-apiserver: watches.

kopf lists, then watches from the list's resourceVersion with bookmarks and a timeout; the
consumer pods watch their ConfigMap by label from the version they listed; kubectl watches one
object by name. Each watch below is opened on both servers and the events compared: their
types, the objects they carry, the bookmarks, and the 410 that sends a client back to a list.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.devstack.wire.conformance import exchanges

MERGE = "application/merge-patch+json"
Events = list[dict[str, Any]]

#: The server's own end of a watch that asks for none: longer than any test reads one.
SERVER_TIMEOUT_S = 15


def _configmaps(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps" + (f"/{name}" if name else "")


def _shapes(events: Events) -> list[tuple[str, str | None]]:
    return [(e["type"], (e["object"].get("metadata") or {}).get("name")) for e in events]


def _versions(events: Events) -> list[int]:
    return [int(e["object"]["metadata"]["resourceVersion"]) for e in events]


def _bookmark(events: Events) -> bool:
    return any(e["type"] == "BOOKMARK" for e in events)


def _watch(
    servers: exchanges.Servers,
    path: str,
    query: dict[str, str] | Callable[[exchanges.Wire], dict[str, str]],
    *,
    until: Callable[[Events], bool],
    timeout: float = exchanges.WATCH_TIMEOUT_S,
    during: Callable[[exchanges.Wire], object] | None = None,
) -> tuple[Events, Events]:
    """The events each server sends on the same watch: (local, real). ``during(wire)`` is
    sent to that server once its watch is open. A watch that asks for no timeout gets one,
    so that no stream outlives its test on either server."""
    found = []
    for wire in servers:
        asked = {"timeoutSeconds": str(SERVER_TIMEOUT_S)}
        asked.update(query(wire) if callable(query) else query)
        status, events = wire.watch(
            path,
            asked,
            until=until,
            timeout=timeout,
            during=None if during is None else functools.partial(during, wire),
        )
        assert status == 200, (wire, events)
        found.append(events)
    return found[0], found[1]


def test_a_resumed_watch_sees_objects_enter_and_leave_its_selection(
    servers: exchanges.Servers, namespace: str
) -> None:
    for name, app in (("a", "x"), ("b", "y")):
        body = {"metadata": {"name": name, "labels": {"app": app}}}
        servers.request("POST", _configmaps(namespace), body=body).agree(201)
    listed = servers.request("GET", _configmaps(namespace), query={"labelSelector": "app=x"})
    listed.agree(200)
    relabel = [("b", "x"), ("a", "z"), ("b", "x")]  # b enters, a leaves, b stays (no event)
    for name, app in relabel:
        patch = {"metadata": {"labels": {"app": app}}}
        servers.request("PATCH", _configmaps(namespace, name), body=patch, content_type=MERGE)
    servers.request(
        "PATCH", _configmaps(namespace, "b"), body={"data": {"k": "v"}}, content_type=MERGE
    )
    local, real = _watch(
        servers,
        _configmaps(namespace),
        lambda w: {"labelSelector": "app=x", "resourceVersion": str(listed.of(w).version)},
        until=lambda events: len(events) >= 3,
    )
    assert _shapes(local) == _shapes(real) == [("ADDED", "b"), ("DELETED", "a"), ("MODIFIED", "b")]
    for events in (local, real):
        assert _versions(events) == sorted(set(_versions(events)))  # strictly increasing
    assert local[-1]["object"]["data"] == real[-1]["object"]["data"] == {"k": "v"}
    # An object that leaves the selection leaves as it was while it matched (kube-apiserver's
    # cache sends the previous object at the change's version): a client that keys what it
    # keeps by the selected labels finds what to drop.
    for events in (local, real):
        assert events[1]["object"]["metadata"]["labels"] == {"app": "x"}


def test_a_watch_without_a_version_starts_with_what_there_is_and_a_bookmark(
    servers: exchanges.Servers, namespace: str
) -> None:
    servers.request("POST", _configmaps(namespace), body={"metadata": {"name": "a"}}).agree(201)
    for query in (
        {"allowWatchBookmarks": "true"},
        {"allowWatchBookmarks": "true", "resourceVersion": "0"},
        {
            "allowWatchBookmarks": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
        },
    ):
        local, real = _watch(servers, _configmaps(namespace), query, until=_bookmark)
        assert _shapes(local) == _shapes(real) == [("ADDED", "a"), ("BOOKMARK", None)], query
        for events in (local, real):
            end = events[-1]["object"]["metadata"]
            assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
            assert int(end["resourceVersion"]) >= _versions(events[:1])[0]
    # Without bookmarks, the objects only.
    local, real = _watch(
        servers, _configmaps(namespace), {"timeoutSeconds": "1"}, until=lambda events: False
    )
    assert _shapes(local) == _shapes(real) == [("ADDED", "a")]


def test_a_bookmark_tells_a_selective_watch_of_newer_versions_before_its_timeout(
    servers: exchanges.Servers, namespace: str
) -> None:
    listed = servers.request("GET", _configmaps(namespace), query={"labelSelector": "app=x"})
    made: dict[str, exchanges.Answer] = {}

    def unselected(wire: exchanges.Wire) -> None:
        # Something the open watch does not select moves its kind's version on...
        other = {"metadata": {"name": "other", "labels": {"app": "y"}}}
        made[wire.name] = wire.request("POST", _configmaps(namespace), body=other)

    # ...and a bookmark says so, at the latest just before the watch's timeout ends it.
    local, real = _watch(
        servers,
        _configmaps(namespace),
        lambda w: {
            "labelSelector": "app=x",
            "resourceVersion": str(listed.of(w).version),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "4",
        },
        until=_bookmark,
        timeout=8,
        during=unselected,
    )
    assert _shapes(local) == _shapes(real) == [("BOOKMARK", None)]
    for events, wire in zip((local, real), servers, strict=True):
        assert _versions(events)[0] >= made[wire.name].version
        assert "annotations" not in events[0]["object"]["metadata"]


def test_a_watch_by_name_sees_that_object_only(servers: exchanges.Servers, namespace: str) -> None:
    for name in ("a", "b"):
        servers.request("POST", _configmaps(namespace), body={"metadata": {"name": name}})
    listed = servers.request(
        "GET", _configmaps(namespace), query={"fieldSelector": "metadata.name=b"}
    )
    for name in ("a", "b"):
        patch = {"data": {"k": name}}
        servers.request("PATCH", _configmaps(namespace, name), body=patch, content_type=MERGE)
    local, real = _watch(
        servers,
        _configmaps(namespace),
        lambda w: {
            "fieldSelector": "metadata.name=b",
            "resourceVersion": str(listed.of(w).version),
        },
        until=lambda events: len(events) >= 1,
    )
    assert _shapes(local) == _shapes(real) == [("MODIFIED", "b")]


def test_a_watch_from_before_its_resource_was_served_is_gone(
    servers: exchanges.Servers, namespace: str, ehc_spec: dict[str, Any]
) -> None:
    # The custom resources are served since their CRD was installed, well after version 1:
    # a watch cannot resume from before then, and must list again.
    path = f"/apis/eventhub-balancer.dev/v1alpha1/namespaces/{namespace}/eventhubconsumers"
    body = {
        "apiVersion": "eventhub-balancer.dev/v1alpha1",
        "kind": "EventHubConsumer",
        "metadata": {"name": "o"},
        "spec": copy.deepcopy(ehc_spec),
    }
    servers.request("POST", path, body=body).agree(201)
    local, real = _watch(servers, path, {"resourceVersion": "1"}, until=lambda events: True)
    assert [e["type"] for e in local] == [e["type"] for e in real] == ["ERROR"]
    for events in (local, real):
        status = events[0]["object"]
        assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
        assert status["message"].startswith("too old resource version: 1 (")


def test_compacting_etcd_expires_no_watch_the_cache_still_serves(
    servers: exchanges.Servers, namespace: str, real_kube: RealControlPlane
) -> None:
    """A real server serves watches from its watch cache, which keeps its own window of
    changes: compacting etcd's history does not expire a resume the cache can still serve
    (the local API, whose history is its cache, answers the same)."""
    servers.request("POST", _configmaps(namespace), body={"metadata": {"name": "a"}}).agree(201)
    listed = servers.request("GET", _configmaps(namespace)).agree(200)
    patch = {"data": {"k": "v"}}
    servers.request("PATCH", _configmaps(namespace, "a"), body=patch, content_type=MERGE)
    real_kube.compact()
    local, real = _watch(
        servers,
        _configmaps(namespace),
        lambda w: {"resourceVersion": str(listed.of(w).version)},
        until=lambda events: len(events) >= 1,
    )
    assert _shapes(local) == _shapes(real) == [("MODIFIED", "a")]
