"""``ehb consume --spark`` on a real cluster: a standalone master, and Spark Connect.

The consumer is the real CLI in a child process, as in ``tests/consumer/wire/
test_assignment_file.py``: an assignment file instead of Kubernetes, the Event Hubs emulator
and Azurite. Its handler (``spark_counting``) collects every trigger's DataFrame on the
cluster and records what it saw; the test checks that every event reached Spark exactly once,
in the session the flags asked for, and that every partition's checkpoint is its last event.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.support import consumerprocesses
from tests.support.consumerfakes import configmap
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.operator import wait_for

#: The session starts while the receivers open (10-20 s on a loaded 2-core machine), then
#: every trigger is a Spark job or two.
WAIT_S = 90.0

#: Events per partition; partition 3 gets none (its share of a trigger stays empty).
SENT = {"0": 120, "1": 70, "2": 35}

#: Flags for a driver in the consumer against the standalone cluster: small executors, a
#: driver the executors reach on loopback, light short-lived JVMs.
MASTER_CONF = (
    "spark.executor.memory=512m",
    "spark.cores.max=2",
    "spark.driver.memory=512m",
    "spark.driver.host=127.0.0.1",
    "spark.driver.bindAddress=127.0.0.1",
    "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
)


def triggers(directory: Path) -> list[dict[str, Any]]:
    path = directory / "pod-a.triggers.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def processed(directory: Path) -> list[tuple[str, int]]:
    return [(p, n) for t in triggers(directory) for p, n in t["events"]]


def consume(
    spark_flags: list[str],
    *,
    emulator: Any,
    azurite: Any,
    container: str,
    tmp_path: Path,
) -> list[dict[str, Any]]:
    """Run ``ehb consume --spark`` until it processed ``SENT``, stop it; its triggers."""
    cs = emulator.connection_string()
    asyncio.run(send_events(cs, "orders", SENT))
    assignment = tmp_path / "assignment.json"
    owned = {p: (1, "owned") for p in ("0", "1", "2", "3")}
    assignment.write_text(json.dumps(configmap(1, owned, checkpointContainer=container)))
    env = consumerprocesses.file_consumer_env(
        tmp_path,
        eventhub=cs,
        blob=azurite.connection_string,
        extra={"EHB_TEST_RECORD_DIR": str(tmp_path)},
    )
    command = consumerprocesses.consume_command(
        "spark_counting:process",
        "--spark",
        *spark_flags,
        "--pod-name",
        "pod-a",
        "--assignment-file",
        str(assignment),
        "--ack-file",
        str(tmp_path / "acks.json"),
        "--batch-size",
        "50",
        verbose=True,
        shutdown_timeout=20,
    )
    log = tmp_path / "consumer.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    try:
        wait_for(
            lambda: len(processed(tmp_path)) >= sum(SENT.values()) or process.poll() is not None,
            timeout=WAIT_S,
            what="every event through Spark",
        )
        assert process.poll() is None, "the consumer ended early"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        print(log.read_text(errors="replace")[-4000:])
    # The receivers opened while the session was starting, not after it.
    text = log.read_text(errors="replace")
    assert text.index(": processing with epoch") < text.index("the SparkSession is ready")
    return triggers(tmp_path)


def check(seen: list[dict[str, Any]], *, session: str, azurite: Any, container: str) -> None:
    events = [(p, n) for t in seen for p, n in t["events"]]
    # Every event reached Spark exactly once, in the session the flags asked for.
    assert sorted(events) == sorted((p, n) for p, count in SENT.items() for n in range(count))
    assert {t["session"] for t in seen} == {session}
    for t in seen:
        assert t["batch_ids"] == [t["batch_id"]]
        assert t["size"] == len(t["events"])
        for partition, (first, last) in t["ranges"].items():
            mine = [n for p, n in t["events"] if p == partition]
            assert (min(mine), max(mine)) == (first, last)
    # Each partition's checkpoint is its last event (partition 3 never had one).
    written = asyncio.run(
        consumerprocesses.checkpoint_positions(azurite.connection_string, container)
    )
    assert {p: n for p, n in written.items() if p in SENT} == {p: c - 1 for p, c in SENT.items()}


def test_consume_on_a_standalone_master(
    spark_master_url: str,
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    tmp_path: Path,
) -> None:
    flags = ["--spark-master", spark_master_url]
    for setting in MASTER_CONF:
        flags += ["--spark-conf", setting]
    container = blob_container.container_name
    seen = consume(
        flags, emulator=consumer_emulator, azurite=azurite, container=container, tmp_path=tmp_path
    )
    check(seen, session=spark_master_url, azurite=azurite, container=container)


def test_consume_through_spark_connect(
    spark_connect_url: str,
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    tmp_path: Path,
) -> None:
    container = blob_container.container_name
    seen = consume(
        ["--spark-remote", spark_connect_url],
        emulator=consumer_emulator,
        azurite=azurite,
        container=container,
        tmp_path=tmp_path,
    )
    check(seen, session="connect", azurite=azurite, container=container)
