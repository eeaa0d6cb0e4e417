"""A ``--spark`` handler that records each trigger as a JSON line: what the cluster saw.

The events are read back from the DataFrame itself (``df.select(...).collect()``: a Spark
job on the session's cluster, or on the Connect server), with the trigger's batch id, its
attempt, every partition's sequence range, and which kind of session ran it, so that a test
checks that every event reached Spark, once, and where. One file per pod in
``EHB_TEST_RECORD_DIR``: ``<pod>.triggers.jsonl``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from eventhub_balancer.consumer import TriggerContext


def session_kind(df: Any) -> str:
    """``connect`` for a Spark Connect DataFrame, else the classic session's master."""
    if ".connect." in type(df).__module__:
        return "connect"
    return str(df.sparkSession.sparkContext.master)


def process(df: Any, context: TriggerContext) -> None:
    rows = df.select("partition", "sequence_number", "batch_id").collect()
    record = {
        "pod": context.pod,
        "batch_id": context.batch_id,
        "attempt": context.attempt,
        "size": context.size,
        "session": session_kind(df),
        "ranges": {
            p: [r.first_sequence_number, r.last_sequence_number]
            for p, r in context.partitions.items()
        },
        "events": [[r["partition"], r["sequence_number"]] for r in rows],
        "batch_ids": sorted({r["batch_id"] for r in rows}),
    }
    directory = os.environ["EHB_TEST_RECORD_DIR"]
    with open(os.path.join(directory, f"{context.pod}.triggers.jsonl"), "a") as out:
        out.write(json.dumps(record) + "\n")
