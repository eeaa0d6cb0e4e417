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
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Partition ends the backlog probes may read per second, over every consumer.
READS_PER_SECOND = 20.0
#: Unspent reads pile up to this many seconds' worth (a burst of probes after a quiet spell).
BURST_SECONDS = 10.0


class Budget:
    """A token bucket of partition reads (`backlogs`); one per operator."""

    def __init__(
        self,
        *,
        per_second: float = READS_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_second = per_second
        self.clock = clock
        self.capacity = per_second * BURST_SECONDS
        self._tokens = self.capacity
        self._at = clock()
        #: probes skipped because the budget was spent, for the tests and the docs
        self.skipped = 0

    def take(self, partitions: int) -> bool:
        """Whether a probe of ``partitions`` may read now; it is charged if so. A hub larger
        than the whole bucket may read once the bucket is full, and runs it into debt."""
        now = self.clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens >= min(partitions, self.capacity):
            self._tokens -= partitions
            return True
        self.skipped += 1
        return False
