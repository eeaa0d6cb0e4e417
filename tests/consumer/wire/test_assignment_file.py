"""``ehb consume --assignment-file``: a consumer without Kubernetes, through the real CLI.

The assignment is a ConfigMap-shaped JSON file that whoever runs the consumer edits; the
acknowledgements go to ``--ack-file``. The process applies the file, follows a rewrite that
revokes a partition (final checkpoint, then ``released``), and on SIGTERM releases the rest.
No kubeconfig exists: a Kubernetes call would fail the run.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

from eventhub_balancer.contracts import configmaps
from tests.support import consumerprocesses
from tests.support.consumerfakes import configmap
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.operator import wait_for

#: Every wait for the consumer process is bounded by this (seconds).
WAIT_S = 30.0


def write_atomically(path: Path, body: dict[str, Any]) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(body))
    temporary.replace(path)


def acknowledged(path: Path) -> dict[str, str]:
    try:
        body = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return dict(body["metadata"]["annotations"])


def records(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return [(p, int(n)) for p, n in (line.split() for line in path.read_text().splitlines())]


def test_assignment_file_applies_revokes_and_releases_on_sigterm(
    consumer_emulator: Any, azurite: Any, blob_container: Any, tmp_path: Path
) -> None:
    cs = consumer_emulator.connection_string()
    container = blob_container.container_name
    asyncio.run(send_events(cs, "orders", {"0": 300, "1": 200}))
    assignment = tmp_path / "assignment.json"
    acks = tmp_path / "acks.json"
    write_atomically(
        assignment,
        configmap(1, {"0": (1, "owned"), "1": (1, "owned")}, checkpointContainer=container),
    )
    env = consumerprocesses.file_consumer_env(
        tmp_path,
        eventhub=cs,
        blob=azurite.connection_string,
        extra={"EHB_TEST_RECORD_DIR": str(tmp_path)},
    )
    command = consumerprocesses.consume_command(
        "recording:process",
        "--pod-name",
        "pod-a",
        "--assignment-file",
        str(assignment),
        "--ack-file",
        str(acks),
        "--batch-size",
        "100",
    )
    done = tmp_path / "pod-a.log"
    log = tmp_path / "consumer.stderr"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    try:
        wait_for(
            lambda: configmaps.parse_applied_generation(acknowledged(acks)) == 1,
            timeout=WAIT_S,
            what="generation 1 applied",
        )
        wait_for(lambda: len(records(done)) >= 500, timeout=WAIT_S, what="the backlog")
        write_atomically(
            assignment,
            configmap(2, {"0": (1, "owned"), "1": (1, "revoking")}, checkpointContainer=container),
        )
        wait_for(
            lambda: configmaps.parse_released(acknowledged(acks)) == {"1": 1},
            timeout=WAIT_S,
            what="partition 1 released",
        )
        assert configmaps.parse_applied_generation(acknowledged(acks)) == 2
        asyncio.run(send_events(cs, "orders", {"0": 50, "1": 50}))
        wait_for(lambda: len(records(done)) >= 550, timeout=WAIT_S, what="partition 0's news")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        print(log.read_text(errors="replace")[-3000:])
    # Partition 1 was given up before its news arrived; partition 0 was processed to the end.
    assert sorted(records(done)) == [("0", n) for n in range(350)] + [("1", n) for n in range(200)]
    assert configmaps.parse_released(acknowledged(acks)) == {"0": 1, "1": 1}
    positions = consumerprocesses.checkpoint_positions(azurite.connection_string, container)
    assert asyncio.run(positions) == {"0": 349, "1": 199}
