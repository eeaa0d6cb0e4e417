"""`memos`: a round keeps what it used, an entry is used only if it fits, memory is bounded."""

from __future__ import annotations

import functools

from eventhub_balancer.reconciling import memos


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
