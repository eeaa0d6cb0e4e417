"""The Spark side of ``ehb bench consumer`` on a real local session: what its trigger figure
counts (the figures themselves are the benchmark's, never asserted here)."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer.consumer import contexts
from eventhub_balancer_devstack.benchmarks import sparkdrains


async def test_the_trigger_figure_times_one_trigger_per_round(spark_session: Any) -> None:
    seen: list[contexts.TriggerContext] = []
    counting = sparkdrains._spark_count

    def recording(df: Any, context: contexts.TriggerContext) -> None:
        seen.append(context)
        counting(df, context)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sparkdrains, "_spark_count", recording)
        ms = await sparkdrains.trigger_overhead_ms(spark_session, events=80, repeats=2)
    assert ms > 0
    # A warm-up round, then the timed ones: each all 8 partitions' batches in one trigger.
    assert [c.batch_id for c in seen] == [1, 2, 3]
    assert all(sorted(c.partitions) == [str(p) for p in range(8)] for c in seen)
    assert all(c.size == 80 for c in seen)
