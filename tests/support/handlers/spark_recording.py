"""The ``--spark`` handler of the end-to-end Spark run: the example pipeline, then a record.

It runs ``minute_counts.pipeline.process`` (the repository's example: per-minute counts
written as Parquet) on the trigger's DataFrame and, once that succeeded, appends the trigger's
``partition sequence_number`` lines, read back from the DataFrame itself, to the pod's file,
so that the test counts every event the Spark pipeline processed, and how often.
"""

from __future__ import annotations

import os
from typing import Any

from minute_counts import pipeline

from eventhub_balancer.consumer import TriggerContext


def process(df: Any, context: TriggerContext) -> None:
    rows = df.select("partition", "sequence_number").collect()
    pipeline.process(df, context)
    lines = "".join(f"{r['partition']} {r['sequence_number']}\n" for r in rows)
    directory = os.environ["EHB_TEST_RECORD_DIR"]
    with open(os.path.join(directory, f"{context.pod}.log"), "a") as out:
        out.write(lines)
