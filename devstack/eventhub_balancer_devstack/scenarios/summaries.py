"""What a run came to: its records held against what the hub holds, step by step.

Events lost (produced, never processed) and duplicates (processed more than once) are
counted over the whole run, and each is attributed to the step during which it happened: a
duplicate by when it was processed again, a lost event by when it was enqueued.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence

from eventhub_balancer_devstack import recording
from eventhub_balancer_devstack.scenarios import systems
from eventhub_balancer_devstack.scenarios.models import StepResult, Summary


def summarize(
    *,
    results: Sequence[StepResult],
    tally: recording.Tally,
    produced: dict[str, int],
    site: systems.Site,
) -> Summary:
    """The run's summary; ``produced``: the events produced per partition, ``site``: where
    the enqueued times of lost events are read."""
    starts = [r.started for r in results]
    # Repeats are stamped with the wall clock; steps with the monotonic one.
    offset = time.time() - time.monotonic()
    per_step = [0] * len(results)
    for at, _, _ in tally.repeats if results else ():
        index = bisect.bisect_right(starts, at - offset) - 1
        per_step[max(0, index)] += 1
    missing = tally.missing(produced)
    lost_per_step = [0] * len(results)
    enqueued: dict[str, dict[int, float]] = {}
    for partition, n in missing if results else ():
        if partition not in enqueued:
            enqueued[partition] = {
                e.sequence_number: e.enqueued_ms / 1000
                for e in site.stack.eventhubs.event_positions(site.hub, partition)
            }
        at = enqueued[partition].get(n, 0.0)
        index = bisect.bisect_right(starts, at - offset) - 1
        lost_per_step[max(0, index)] += 1
    return {
        "produced": sum(produced.values()),
        "processed": tally.processed,
        "lost": len(missing),
        "duplicates": tally.duplicates,
        "steps": [
            {
                "step": r.step.name,
                "kind": r.kind,
                "balanced_s": r.balanced_s,
                "end_to_end_s": r.end_to_end_s,
                "pods_up_s": r.pods_up_s,
                "failover_s": r.failover_s,
                "pod": r.pod,
                "moved": r.moved,
                "duplicates": per_step[i],
                "lost": lost_per_step[i],
            }
            for i, r in enumerate(results)
        ],
    }
