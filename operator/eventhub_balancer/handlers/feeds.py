"""Which pods and ConfigMaps changed for each consumer since its reader last asked.

The watch's event handlers know which consumers an event concerns, and `caching.CachedKube`
knows what its own writes changed; both tell the names here (`Feeds.note`, `Feeds.note_all`).
A consumer's reader takes them once per cycle (`Feeds.take`) and reads only those bodies
again (`observing.observe_pods`, `fleets.advance_by`), so that a cycle reads what changed, not
the fleet. A name told in vain costs one lookup and one comparison; a name not told would be a
change missed, so whenever in doubt a name is told to every consumer of the namespace.

A feed starts at the reader's first take (which says "read whole"); its names are bounded,
and past the bound it says "read whole" too. What changes the served view without naming
objects (a re-list after a watch error, a kept write given up) is the cache's `mark`, which
the reader compares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

#: Names a feed keeps before it says "read whole" instead (a consumer whose reader fell far
#: behind, or an event storm): what it costs stays bounded.
MAX_FEED_NAMES = 10_000


@dataclasses.dataclass
class Feed:
    """The names told for one consumer since its reader last took them, by kind."""

    names: dict[str, set[str]]
    overflow: bool = False

    def add(self, kind: str, name: str) -> None:
        """``name`` of ``kind`` told; a kind the feed does not follow is no news to it."""
        names = self.names.get(kind)
        if self.overflow or names is None:
            return
        names.add(name)
        if sum(map(len, self.names.values())) > MAX_FEED_NAMES:
            self.names = {k: set() for k in self.names}
            self.overflow = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class Changed:
    """The names, by kind, whose served body may have changed for one consumer."""

    names: dict[str, frozenset[str]]

    def of(self, kind: str) -> frozenset[str]:
        return self.names.get(kind, frozenset())


class Feeds:
    """One `Feed` per consumer (namespace, name) whose reader takes them."""

    def __init__(self, *, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        self._feeds: dict[tuple[str, str], Feed] = {}

    def note(self, consumer: tuple[str, str], *, kind: str, object_name: str) -> None:
        """``object_name`` may have changed for ``consumer`` (told only once it takes)."""
        feed = self._feeds.get(consumer)
        if feed is not None:
            feed.add(kind, object_name)

    def note_all(self, namespace: str, *, kind: str, object_name: str) -> None:
        """``object_name`` may have changed for any consumer of ``namespace`` (a write of the
        operator's, or a ConfigMap whose old label its event does not show)."""
        for (ns, _), feed in self._feeds.items():
            if ns == namespace:
                feed.add(kind, object_name)

    def whole(self, consumer: tuple[str, str]) -> None:
        """Something changed for ``consumer`` that no name says: its next read is whole."""
        feed = self._feeds.get(consumer)
        if feed is not None:
            feed.overflow = True

    def take(self, consumer: tuple[str, str]) -> Changed | None:
        """The names told since the last take, and a fresh feed; None: read whole (the first
        take, or more names than a feed keeps)."""
        feed = self._feeds.get(consumer)
        self._feeds[consumer] = Feed(names={kind: set() for kind in self.kinds})
        if feed is None or feed.overflow:
            return None
        return Changed(names={kind: frozenset(names) for kind, names in feed.names.items()})

    def forget(self, consumer: tuple[str, str]) -> None:
        self._feeds.pop(consumer, None)

    def __len__(self) -> int:
        return len(self._feeds)
