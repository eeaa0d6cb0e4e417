"""The values of the Secrets the consumers name, kept between cycles.

Secrets are not watched: that would take list/watch on every Secret of each namespace. A
value is kept until a dependency rejects what it was used for (`SecretValues.forget`: the
next attempt reads it afresh, so a rotated or fixed key is used as soon as the backoff
allows) or for `REFRESH_SECONDS`. A value is never logged or shown.

Bound: the keys read within the last `REFRESH_SECONDS`. A value older than that is never used
again, so each read afresh drops every such value: the Secrets of consumers deleted (or
edited to name others) do not stay for the life of the operator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

#: How long a Secret's value is used unless rejected: a rotated key is picked up within it.
REFRESH_SECONDS = 600.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Value:
    value: str
    read_at: float


class SecretValues:
    """Secret values by (namespace, name, key), each read through ``read`` when absent,
    rejected or older than `REFRESH_SECONDS`; at most one per key read in that time."""

    def __init__(self, read: Callable[..., Awaitable[str]], *, clock: Callable[[], float]) -> None:
        self._read = read
        self._clock = clock
        self._values: dict[tuple[str, str, str], _Value] = {}
        #: reads that went to the API server, for the benchmark
        self.reads = 0

    async def get(self, *, namespace: str, name: str, key: str) -> str:
        now = self._clock()
        kept = self._values.get((namespace, name, key))
        if kept is not None and now - kept.read_at < REFRESH_SECONDS:
            return kept.value
        self.reads += 1
        value = await self._read(namespace=namespace, name=name, key=key)
        for old in [k for k, v in self._values.items() if now - v.read_at >= REFRESH_SECONDS]:
            del self._values[old]
        self._values[namespace, name, key] = _Value(value=value, read_at=now)
        return value

    def forget(self, *, namespace: str, name: str) -> None:
        """What a dependency rejected (or failed with) is read afresh at the next attempt."""
        for kept in [k for k in self._values if k[:2] == (namespace, name)]:
            del self._values[kept]
