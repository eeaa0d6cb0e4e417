"""A ``--spark`` handler to be killed in the worst moment: the example's write done, the
checkpoints not.

It runs ``exactly_once.pipeline.process`` (the repository's example: every event once in a
Parquet table) and appends the trigger (its batch id and partition ranges) to
``<pod>.triggers.jsonl`` in ``EHB_TEST_RECORD_DIR``. On trigger number
``EHB_TEST_KILL_AT_TRIGGER`` (default 2) it then writes that trigger's record to the file
``EHB_TEST_MARKER`` and sleeps: the trigger's rows are in the table, and its checkpoints
never move, until the test kills the process.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from exactly_once import pipeline

from eventhub_balancer.consumer import TriggerContext

#: Long enough that only the kill ends it.
SLEEP_S = 600.0


def process(df: Any, context: TriggerContext) -> None:
    pipeline.process(df, context)
    record = {
        "pod": context.pod,
        "batch_id": context.batch_id,
        "attempt": context.attempt,
        "ranges": {
            p: {
                "epoch": r.epoch,
                "first": r.first_sequence_number,
                "last": r.last_sequence_number,
                "size": r.size,
            }
            for p, r in context.partitions.items()
        },
    }
    line = json.dumps(record)
    directory = os.environ["EHB_TEST_RECORD_DIR"]
    with open(os.path.join(directory, f"{context.pod}.triggers.jsonl"), "a") as out:
        out.write(line + "\n")
    if context.batch_id == int(os.environ.get("EHB_TEST_KILL_AT_TRIGGER") or 2):
        marker = os.environ["EHB_TEST_MARKER"]
        with open(marker + ".tmp", "w") as out:
            out.write(line)
        os.replace(marker + ".tmp", marker)
        time.sleep(SLEEP_S)
