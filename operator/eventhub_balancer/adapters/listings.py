"""A LIST's answer as the cache needs it: the items, and as of which version they are whole.

A module of its own (no client import) so that the handlers' ports can name the shape the
adapter returns without importing the adapter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class Listing:
    """A LIST's items and its own metadata: its resourceVersion says as of when the items
    are complete, so a re-list removes nothing newer (`handlers.cache.shelves.Shelf.resync`)."""

    items: tuple[Mapping[str, Any], ...]
    metadata: Mapping[str, Any]
