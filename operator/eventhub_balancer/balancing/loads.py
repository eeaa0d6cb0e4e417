"""The members' loads under ``weighting: lag``, kept so that the extremes are cheap to find.

Lag weighting places and sheds partitions one at a time, each time asking "who is the most
loaded?" and "who would be least loaded after taking this partition?". Scanning every member
for each partition is O(P x N), too slow for 32768 partitions over 4096 pods, so members sit
in heaps: one over normalized load (load / weight) for the most loaded, and one per distinct
weight for the least loaded, since among equal weights the least loaded member is also the
best receiver for a partition of any size. Heaps are lazy: stale entries are skipped.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from eventhub_balancer.balancing import models


class Loads:
    """Load per member, with the most loaded and the best receiver at hand."""

    def __init__(
        self, *, loads: Mapping[models.MemberName, int], weights: Mapping[models.MemberName, float]
    ) -> None:
        self._loads = dict(loads)
        self._weights = dict(weights)
        self._keys = {name: models.name_key(name) for name in self._loads}
        self._lightest: dict[float, list[tuple[int, models.NameKey, models.MemberName]]] = {}
        self._heaviest: list[tuple[float, models.NameKey, models.MemberName]] = []
        for name, load in self._loads.items():
            heap = self._lightest.setdefault(self._weights[name], [])
            heap.append((load, self._keys[name], name))
            self._heaviest.append((-self.normalized(name), self._keys[name], name))
        for heap in self._lightest.values():
            heapq.heapify(heap)
        heapq.heapify(self._heaviest)

    def __getitem__(self, name: models.MemberName) -> int:
        return self._loads[name]

    def weight(self, name: models.MemberName) -> float:
        return self._weights[name]

    def normalized(self, name: models.MemberName) -> float:
        return self._loads[name] / self._weights[name]

    def add(self, name: models.MemberName, amount: int) -> None:
        self._loads[name] += amount
        key = self._keys[name]
        heapq.heappush(self._lightest[self._weights[name]], (self._loads[name], key, name))
        heapq.heappush(self._heaviest, (-self.normalized(name), key, name))

    def heaviest(self, *, skip: set[models.MemberName]) -> models.MemberName | None:
        """The member with the highest load per weight (ties by name), not in `skip`."""
        heap = self._heaviest
        while heap:
            negative, _, name = heap[0]
            if name not in skip and -negative == self.normalized(name):
                return name
            heapq.heappop(heap)
        return None

    def lightest(self, *, avoid: models.MemberName | None = None) -> list[models.MemberName]:
        """The least loaded member of each weight, other than `avoid`: the only possible
        best receivers."""
        result = []
        for heap in self._lightest.values():
            # Skip stale entries and `avoid` (a load that came back to an earlier value leaves
            # a duplicate entry), then put `avoid`'s entries back.
            kept = []
            while heap and (heap[0][2] == avoid or heap[0][0] != self._loads[heap[0][2]]):
                entry = heapq.heappop(heap)
                if entry[2] == avoid:
                    kept.append(entry)
            if heap:
                result.append(heap[0][2])
            for entry in kept:
                heapq.heappush(heap, entry)
        return result

    def receiver(
        self, size: int, *, avoid: models.MemberName | None = None
    ) -> models.MemberName | None:
        """Who would carry the least load per weight after taking `size` (ties by name),
        other than `avoid` unless nobody else is there."""
        best: tuple[float, models.NameKey, models.MemberName] | None = None
        for name in self.lightest(avoid=avoid):
            candidate = ((self._loads[name] + size) / self._weights[name], self._keys[name], name)
            if best is None or candidate < best:
                best = candidate
        if best is None and avoid is not None and avoid in self._loads:
            return avoid
        return best[2] if best is not None else None
