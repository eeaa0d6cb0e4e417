"""A child process for the session tests: build a session, run a trigger-shaped query.

``python -m tests.spark.wire._probe --out FILE [--master M | --remote R] [--log-marker]
[--lose]`` writes one JSON document to FILE and prints nothing, so that whatever appears on
its stdout is Spark's (the JVM's, log4j's) and a leak. ``--log-marker`` logs one WARN and one
INFO line through the JVM's log4j, to show where Spark's own logs go and at what level.
``--lose`` then kills the JVM and runs the query again on a new session (`lose`).
``--fail-write DIR`` then writes Parquet where it cannot be written, to show what Spark logs
of a failed trigger.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from typing import Any

from eventhub_balancer.adapters import deliveries
from eventhub_balancer.spark import flags, frames, sessions

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)

#: Events per partition of the probe's trigger.
COUNTS = {"0": 5, "1": 3, "2": 7}


@dataclasses.dataclass(frozen=True)
class Share:
    epoch: int
    first_sequence_number: int
    last_sequence_number: int


def trigger() -> tuple[list[deliveries.ReceivedEvent], dict[str, Share]]:
    events = [
        deliveries.ReceivedEvent(
            partition=partition,
            sequence_number=n,
            offset=str(n * 100),
            enqueued_time=T0 + datetime.timedelta(seconds=n * 30),
            partition_key=f"k{n % 2}",
            properties={"n": n},
            body=f"{partition}:{n}".encode(),
        )
        for partition, count in COUNTS.items()
        for n in range(count)
    ]
    ranges = {
        p: Share(epoch=1, first_sequence_number=0, last_sequence_number=c - 1)
        for p, c in COUNTS.items()
    }
    return events, ranges


def run(session: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    events, ranges = trigger()
    df = frames.to_dataframe(session, events, batch_id=42, ranges=ranges)
    by_partition = {
        r["partition"]: [r["events"], r["last"]]
        for r in df.groupBy("partition")
        .agg(F.count(F.lit(1)).alias("events"), F.max("last_sequence_number").alias("last"))
        .collect()
    }
    minutes = df.select(F.date_trunc("minute", "enqueued_time").alias("m")).distinct().count()
    return {
        "count": df.count(),
        "by_partition": by_partition,
        "batch_ids": sorted({r["batch_id"] for r in df.select("batch_id").collect()}),
        "minutes": minutes,
        "schema_matches": df.schema == frames.spark_schema(),
        "version": session.version,
    }


def lose(session: Any, master: str) -> Any:
    """Kill the session's JVM, as the out-of-memory killer would; then what a pod does: see
    it lost, let it go, start a new one. Raises if any step does not do what it should."""
    from pyspark import SparkContext

    assert sessions.is_alive(session)
    gateway = SparkContext._gateway
    assert gateway is not None
    gateway.proc.kill()
    gateway.proc.wait(timeout=30)
    assert not sessions.is_alive(session)
    sessions.discard(session)
    again = sessions.build_session(master=master)
    assert again is not session
    assert sessions.is_alive(again)
    return again


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=sessions.DEFAULT_MASTER)
    parser.add_argument("--remote")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--log-marker", action="store_true")
    parser.add_argument("--lose", action="store_true")
    parser.add_argument("--fail-write", help="a directory no Parquet write can create")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    session = sessions.build_session(
        master=args.master, remote=args.remote, conf=flags.parse_conf(args.conf)
    )
    try:
        if args.log_marker:
            jvm = session.sparkContext._jvm
            log = jvm.org.apache.logging.log4j.LogManager.getLogger("ehb.probe")
            log.warn("ehb-probe-warning")
            log.info("ehb-probe-info")
        result = run(session)
        if args.fail_write:
            print("ehb-probe-failing-write", file=sys.stderr, flush=True)
            try:
                session.range(3).write.mode("overwrite").parquet(args.fail_write)
            except Exception as e:  # the handler's side: one exception, its cause in it
                result["write_failed"] = type(e).__name__
        if args.remote is None:
            result["master"] = session.sparkContext.master
        if args.lose:
            session = lose(session, args.master)
            result["after_loss"] = run(session)
    finally:
        session.stop()
    with open(args.out, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
