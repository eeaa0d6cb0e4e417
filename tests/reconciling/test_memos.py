"""`memos`: a round keeps what it used, an entry is used only if it fits, memory is bounded."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from eventhub_balancer.reconciling import memos, observations
from tests.reconciling import bodies


def lookup(memo: memos.Memo[str, str], scope: str, *keys: str) -> list[str]:
    """Look ``keys`` up in one round of ``scope``: the keys that had to be computed."""
    computed: list[str] = []

    def compute(key: str) -> str:
        computed.append(key)
        return key

    with memo.round(scope) as found:
        for key in keys:
            assert found.get(key, fits=lambda v: True, compute=functools.partial(compute, key))
    return computed


def test_a_round_finds_what_the_last_round_of_its_scope_used() -> None:
    memo: memos.Memo[str, str] = memos.Memo()
    assert lookup(memo, "s", "a", "b") == ["a", "b"]
    assert lookup(memo, "s", "a", "b") == []
    assert lookup(memo, "other", "a") == ["a"]  # each consumer its own
    assert lookup(memo, "s", "a", "c") == ["c"]
    assert lookup(memo, "s", "b") == ["b"]  # the last round did not use it: gone


def test_an_entry_that_does_not_fit_is_computed_again() -> None:
    memo: memos.Memo[str, str] = memos.Memo()
    lookup(memo, "s", "a")
    with memo.round("s") as found:
        assert found.get("a", fits=lambda v: v == "x", compute=lambda: "x") == "x"
    with memo.round("s") as found:
        assert found.get("a", fits=lambda v: v == "x", compute=lambda: "y") == "x"


def test_a_round_keeps_only_the_keys_it_used() -> None:
    memo: memos.Memo[str, str] = memos.Memo()
    lookup(memo, "s", *(str(i) for i in range(100)))
    assert len(memo) == 100
    lookup(memo, "s", "1", "2")
    assert len(memo) == 2
    lookup(memo, "s")
    assert len(memo) == 0


def test_past_its_bound_the_least_recently_used_scopes_go() -> None:
    memo: memos.Memo[str, str] = memos.Memo(max_entries=10)
    for scope in ("a", "b", "c"):
        lookup(memo, scope, "1", "2", "3", "4")
    assert len(memo) <= 10
    assert lookup(memo, "a", "1") == ["1"]  # the oldest scope went first
    assert lookup(memo, "c", "1") == []
    # Churn does not grow it: a thousand consumers come and go, it stays within the bound.
    for i in range(1000):
        lookup(memo, f"consumer-{i}", "1", "2")
        assert len(memo) <= 10


# --- the ConfigMaps read (observations.stored_maps) ---


def configmap(*, rv: str = "1", partitions: str = '{"0":{"epoch":1,"state":"owned"}}') -> Any:
    data = configmaps.build_data(
        spec=bodies.observe(pods=[]).spec,  # type: ignore[arg-type]
        consumer=bodies.NAME,
        pod="a",
        generation=1,
        partitions={},
    )
    data[configmaps.KEY_PARTITIONS] = partitions
    return {
        "metadata": {
            "name": "ehb-orders-a",
            "namespace": bodies.NS,
            "uid": "uid-cm-a",
            "resourceVersion": rv,
            "labels": configmaps.labels(consumer=bodies.NAME, pod="a"),
            "annotations": {configmaps.ANNOTATION_POD_UID: "uid-a"},
        },
        "data": data,
    }


def read(body: Any) -> observations.StoredMap:
    (found,) = observations.stored_maps([body], consumer=bodies.NAME)
    return found


def test_an_unchanged_configmap_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    body = configmap()
    expected = observations.stored_map(body)
    read(body)
    calls: list[object] = []
    parse = configmaps.parse_data

    def counted(data: object) -> configmaps.ParsedData:
        calls.append(data)
        return parse(data)

    monkeypatch.setattr(configmaps, "parse_data", counted)
    assert read(copy.deepcopy(body)) == expected  # an equal body, as a new watch event has it
    assert calls == []


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda b: b["metadata"].update(resourceVersion="2"), id="resourceVersion"),
        pytest.param(
            lambda b: b["data"].update(partitions='{"0":{"epoch":2,"state":"revoking"}}'),
            id="data-same-resourceVersion",
        ),
        pytest.param(
            lambda b: b["metadata"]["annotations"].update(
                {configmaps.ANNOTATION_RELEASED: '{"0":1}'}
            ),
            id="annotation-same-resourceVersion",
        ),
        pytest.param(lambda b: b["data"].pop(configmaps.KEY_POD), id="pod-from-the-label"),
        pytest.param(lambda b: b["metadata"].update(name="renamed"), id="name"),
    ],
)
def test_a_changed_configmap_reads_as_if_nothing_were_kept(change: Any) -> None:
    body = configmap()
    read(body)
    changed = copy.deepcopy(body)
    change(changed)
    assert read(changed) == observations.stored_map(changed)
    assert read(body) == observations.stored_map(body)  # and back


# --- the caches without a consumer to scope them (memos.Cache) ---


def cached(cache: memos.Cache[str, str | None], *keys: str) -> list[str]:
    """Look ``keys`` up: the keys that had to be computed."""
    computed: list[str] = []

    def compute(key: str) -> str | None:
        computed.append(key)
        return None if key == "none" else key.upper()

    for key in keys:
        assert cache.get(key, compute) == (None if key == "none" else key.upper())
    return computed


def test_a_cache_computes_each_input_once_none_included() -> None:
    cache: memos.Cache[str, str | None] = memos.Cache()
    assert cached(cache, "a", "none", "a", "none") == ["a", "none"]
    assert cached(cache, "a", "none") == []


def test_a_cache_entry_that_does_not_fit_is_computed_again() -> None:
    cache: memos.Cache[str, str] = memos.Cache()
    assert cache.get("k", lambda k: "x") == "x"
    assert cache.get("k", lambda k: "y", fits=lambda v: v == "y") == "y"
    assert cache.get("k", lambda k: "z", fits=lambda v: v == "y") == "y"


def test_past_its_bound_a_cache_drops_the_least_recently_used() -> None:
    cache: memos.Cache[str, str | None] = memos.Cache(max_entries=3)
    cached(cache, "a", "b", "c")
    cached(cache, "a")  # used again: "b" is now the oldest
    assert cached(cache, "d") == ["d"]
    assert len(cache) == 3
    assert cached(cache, "a", "c", "d") == []
    assert cached(cache, "b") == ["b"]
    for i in range(1000):
        cached(cache, f"k{i}")
        assert len(cache) <= 3
