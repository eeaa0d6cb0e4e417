"""How many partitions' ends the backlog probes may read, for the whole operator.

Every consumer reads its hub's ends beside its checkpoint store's probe, once a minute, for
``ehb_recommended_replicas`` (docs/operations.md). Event Hubs answers one partition per
request, and the SDK opens a connection for each: at 1,000 consumers of 8 partitions that was
8,000 connections a minute, most of the operator's CPU, and the cycles that move partitions
waited behind them (docs/scale.md). So the probes share a budget of `READS_PER_SECOND`
partitions: a probe that finds it spent is skipped, and its consumer tries again at its next
probe, a minute later. Below about 1,200 partitions probed a minute nothing waits; above, each
consumer's backlog is read less often, in proportion. A decision that weighs partitions by lag
reads the ends it needs whatever the budget says.

The budget is shared between tenants (namespaces): each tenant that probed within
`ACTIVE_SECONDS` draws on a bucket of its own, refilled at an equal share of the rate. One
bucket for all let a tenant with a few hubs of 1,024 partitions run it into debt before every
probe of the others: a 4-partition hub beside three such probes a minute was not read once in
two hours. Now a tenant's large hubs wait on its own share, and the others' probes on theirs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable

#: Partition ends the backlog probes may read per second, over every consumer.
READS_PER_SECOND = 20.0
#: Unspent reads pile up to this many seconds' worth (a burst of probes after a quiet spell).
BURST_SECONDS = 10.0
#: A tenant that probed within this many seconds, or is still in debt, shares the rate (probes
#: come once a minute).
ACTIVE_SECONDS = 120.0


@dataclasses.dataclass
class _Bucket:
    tokens: float
    at: float
    seen: float


class Budget:
    """A token bucket of partition reads per tenant, sharing one rate (`backlogs`); one per
    operator."""

    def __init__(
        self,
        *,
        per_second: float = READS_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_second = per_second
        self.clock = clock
        self._buckets: dict[Hashable, _Bucket] = {}
        #: probes skipped because the budget was spent, for the tests and the docs
        self.skipped = 0

    def take(self, partitions: int, *, tenant: Hashable = None) -> bool:
        """Whether a probe of ``partitions`` for ``tenant`` may read now; it is charged to the
        tenant's share if so. A hub larger than the whole bucket may read once the bucket is
        full, and runs it into debt."""
        now = self.clock()
        # A tenant that stopped probing leaves the shares once its debt is paid.
        share = self.per_second / max(1, len(self._buckets))
        for gone in [
            t
            for t, b in self._buckets.items()
            if now - b.seen > ACTIVE_SECONDS
            and b.tokens + (now - b.at) * share >= share * BURST_SECONDS
        ]:
            del self._buckets[gone]
        share = self.per_second / (len(self._buckets) + (tenant not in self._buckets))
        capacity = share * BURST_SECONDS
        bucket = self._buckets.setdefault(tenant, _Bucket(tokens=capacity, at=now, seen=now))
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at) * share)
        bucket.at = bucket.seen = now
        if bucket.tokens >= min(partitions, capacity):
            bucket.tokens -= partitions
            return True
        self.skipped += 1
        return False
