"""Per-pod results of the last cycle, kept so that an unchanged pod costs a lookup, pure.

A cycle reads every ConfigMap of its consumer and gives every pod its ConfigMap's data, but
between two cycles almost nothing changes: parsing each ConfigMap's JSON and building each
pod's data again would make a steady cycle cost O(pods) in JSON work. A `Memo` keeps what
was computed for each key in the last round of each scope (one scope per consumer), and a
round keeps only the keys it used: memory follows the fleet as it is, not its churn.

A memo never changes a decision. Every entry is checked against the inputs that determine
it before it is used (the caller's ``fits``), so a key is only where to look, never a claim
that the content is the same: the same observation gives the same decision whether the memo
is empty, warm or holds another cycle's entries.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Entries kept over all scopes: a fleet of 1,024 partitions over 1,024 pods is 1,024 per
#: memo and scope; past this total the least recently used consumers' entries go first.
MAX_ENTRIES = 65_536


class Memo(Generic[K, V]):
    """Values by key, per scope; a round keeps only the entries it looked up."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._scopes: collections.OrderedDict[Hashable, dict[K, V]] = collections.OrderedDict()
        self._size = 0

    def round(self, scope: Hashable) -> Round[K, V]:
        """One use of the memo for ``scope`` (a consumer): close it to keep what it used."""
        return Round(self, scope, self._scopes.get(scope, {}))

    def __len__(self) -> int:
        return self._size

    def clear(self) -> None:
        self._scopes.clear()
        self._size = 0

    def _keep(self, scope: Hashable, entries: dict[K, V]) -> None:
        self._size += len(entries) - len(self._scopes.pop(scope, {}))
        self._scopes[scope] = entries
        while self._size > self.max_entries and self._scopes:
            _, dropped = self._scopes.popitem(last=False)
            self._size -= len(dropped)


class Round(Generic[K, V]):
    """The lookups of one call; `close` (or leaving the ``with`` block) keeps them."""

    def __init__(self, memo: Memo[K, V], scope: Hashable, kept: dict[K, V]) -> None:
        self._memo = memo
        self._scope = scope
        self._kept = kept
        self._used: dict[K, V] = {}

    def get(self, key: K, *, fits: Callable[[V], bool], compute: Callable[[], V]) -> V:
        """The value kept for ``key`` if it ``fits`` the inputs at hand, else ``compute()``."""
        value = self._used.get(key)
        if value is None or not fits(value):
            value = self._kept.get(key)
            if value is None or not fits(value):
                value = compute()
        self._used[key] = value
        return value

    def close(self) -> None:
        self._memo._keep(self._scope, self._used)

    def __enter__(self) -> Round[K, V]:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
