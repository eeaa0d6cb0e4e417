"""The handler the end-to-end tests run in consumer processes: it records what it processed.

Each pod appends ``partition sequence_number`` lines to its own file, one write per batch,
so that the test counts every event processed, by whom, and how often. With
``EHB_TEST_HANDLER_SECONDS`` set, the handler then works on for that long before it returns:
its effects are out while its checkpoint is not, the worst moment for a crash.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from eventhub_balancer.consumer import BatchContext, Event


def process(events: Sequence[Event], context: BatchContext) -> None:
    directory = os.environ["EHB_TEST_RECORD_DIR"]
    lines = "".join(f"{e.partition} {e.sequence_number}\n" for e in events)
    with open(os.path.join(directory, f"{context.pod}.log"), "a") as out:
        out.write(lines)
    time.sleep(float(os.environ.get("EHB_TEST_HANDLER_SECONDS") or 0))
