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

Where a computation has no consumer to scope it by (the read-back of a status record, a
ConfigMap's coordinates), a `Cache` keeps values by their whole input (or by an identity that
``fits`` checks), the least recently used going first past its bound: the same rule, that an
entry is used only for the inputs it was made from, without rounds.
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

    def round(self, scope: Hashable, *, partial: bool = False) -> Round[K, V]:
        """One use of the memo for ``scope`` (a consumer): close it to keep what it used;
        ``partial``: it looks up only what changed, and keeps the rest but what it `drop`s."""
        kept = self._scopes.get(scope, {})
        return Round(self, scope, kept, used=dict(kept) if partial else None)

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

    def __init__(
        self, memo: Memo[K, V], scope: Hashable, kept: dict[K, V], *, used: dict[K, V] | None
    ) -> None:
        self._memo = memo
        self._scope = scope
        self._kept = kept
        self._used: dict[K, V] = {} if used is None else used

    def drop(self, key: K) -> None:
        """Keep no entry for ``key`` (a partial round's pod that is gone)."""
        self._used.pop(key, None)

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


#: Entries of one `Cache`: a fleet of 1,024 partitions over 1,024 pods uses a few thousand
#: per consumer; past this the least recently used go first.
MAX_CACHED = 16_384


class Cache(Generic[K, V]):
    """Values by key over all consumers, the least recently used dropped past ``max_entries``.

    The key is either the whole input (then any entry fits) or where to look, with ``fits``
    checking the entry against the input at hand, as in a `Round`."""

    def __init__(self, *, max_entries: int = MAX_CACHED) -> None:
        self.max_entries = max_entries
        self._values: collections.OrderedDict[K, V] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._values.clear()

    def get(
        self, key: K, compute: Callable[[K], V], *, fits: Callable[[V], bool] | None = None
    ) -> V:
        """The value kept for ``key`` (if it ``fits``), else ``compute(key)``, kept."""
        values = self._values
        if key in values:
            value = values[key]
            if fits is None or fits(value):
                values.move_to_end(key)
                return value
        value = compute(key)
        values[key] = value
        values.move_to_end(key)
        if len(values) > self.max_entries:
            values.popitem(last=False)
        return value


#: Consumers whose last results are kept (`Latest`): past this many the least recently used go.
MAX_SCOPES = 4096


class Latest(Generic[V]):
    """The last value per scope (one consumer's last fleet, needs, findings), the least
    recently used scope dropped past ``max_scopes``: a step that works on what changed since
    the last decision finds that decision's results here, and a dropped one is made whole."""

    def __init__(self, *, max_scopes: int = MAX_SCOPES) -> None:
        self.max_scopes = max_scopes
        self._values: collections.OrderedDict[Hashable, V] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._values.clear()

    def get(self, scope: Hashable) -> V | None:
        return self._values.get(scope)

    def put(self, scope: Hashable, value: V) -> None:
        self._values[scope] = value
        self._values.move_to_end(scope)
        while len(self._values) > self.max_scopes:
            self._values.popitem(last=False)
