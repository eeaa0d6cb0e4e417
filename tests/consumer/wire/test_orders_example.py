"""The example handler (examples/orders) consumes real events end to end, as the image runs it.

``ehb --log-format json consume --handler orders.pipeline:process`` against the Event Hubs
emulator and Azurite, its assignment from a file: every order is processed, the checkpoints
reach the last event, the JSON log lines carry the consumer, pod and partition fields, and
SIGTERM releases everything with exit status 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.consumer.wire.test_assignment_file import (
    acknowledged,
    final_checkpoints,
    write_atomically,
)
from tests.support import paths
from tests.support.consumerfakes import configmap
from tests.support.fixtures.operator import wait_for

#: Every wait for the consumer process is bounded by this (seconds).
WAIT_S = 30.0
#: Orders sent to each of the two assigned partitions.
ORDERS_PER_PARTITION = 120


async def send_orders(connection_string: str, hub: str, partitions: list[str]) -> None:
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(connection_string, eventhub_name=hub)
    async with producer:
        for partition in partitions:
            batch = await producer.create_batch(partition_id=partition)
            for n in range(ORDERS_PER_PARTITION):
                order = {"id": f"{partition}-{n}", "amount": 1.5, "status": "paid"}
                batch.add(EventData(json.dumps(order)))
            await producer.send_batch(batch)


def log_records(path: Path) -> list[dict[str, Any]]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def orders_logged(path: Path) -> int:
    """Orders the handler reported, from its one line per batch."""
    total = 0
    for record in log_records(path):
        if record.get("logger") == "orders.pipeline":
            total += int(record["message"].split(": ")[1].split(" ")[0])
    return total


def test_the_example_handler_processes_orders_and_checkpoints(
    consumer_emulator: Any, azurite: Any, blob_container: Any, tmp_path: Path
) -> None:
    cs = consumer_emulator.connection_string()
    container = blob_container.container_name
    asyncio.run(send_orders(cs, "orders", ["0", "1"]))
    assignment = tmp_path / "assignment.json"
    acks = tmp_path / "acks.json"
    write_atomically(
        assignment,
        configmap(1, {"0": (1, "owned"), "1": (1, "owned")}, checkpointContainer=container),
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE", "KUBECONFIG")
    }
    env.update(
        {
            "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),
            "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true",
            "EHB_EVENTHUB_CONNECTION_STRING": cs,
            "EHB_BLOB_CONNECTION_STRING": azurite.connection_string,
        }
    )
    command = [
        sys.executable,
        "-m",
        "eventhub_balancer",
        "-v",
        "--log-format",
        "json",
        "consume",
        "--handler",
        "orders.pipeline:process",
        "--handler-path",
        str(paths.EXAMPLES),
        "--pod-name",
        "orders-0",
        "--consumer",
        "orders",
        "--assignment-file",
        str(assignment),
        "--ack-file",
        str(acks),
        "--batch-size",
        "50",
        "--max-wait",
        "0.2",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--shutdown-timeout",
        "10",
    ]
    log = tmp_path / "consumer.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    try:
        wait_for(
            lambda: orders_logged(log) >= 2 * ORDERS_PER_PARTITION,
            timeout=WAIT_S,
            what="every order processed",
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        print(log.read_text(errors="replace")[-3000:])
    assert orders_logged(log) == 2 * ORDERS_PER_PARTITION
    last = ORDERS_PER_PARTITION - 1
    assert asyncio.run(final_checkpoints(azurite, container)) == {"0": last, "1": last}
    assert acknowledged(acks)
    handler_lines = [r for r in log_records(log) if r.get("logger") == "orders.pipeline"]
    assert {r["partition"] for r in handler_lines} == {"0", "1"}
    assert {(r["consumer"], r["pod"]) for r in handler_lines} == {("orders", "orders-0")}
