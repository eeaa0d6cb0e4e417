"""A batch whose handler kills the consumer process, on the local stack through the real CLI.

The handler SIGKILLs its own process on one event (as a segfault or the OOM killer would),
on every attempt. The test plays the kubelet: each time the process dies it starts it again
in the same pod (same pod name, same crash-marker directory, the same assignment at the same
epoch). Under ``maxAttempts: 3, onFailure: deadLetter`` the third death contains it: the
next process writes the batch as a dead letter without calling the handler, checkpoints past
it, and goes on with the events after it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from eventhub_balancer.adapters import blobs
from eventhub_balancer.contracts import configmaps
from tests.consumer.wire.test_assignment_file import (
    WAIT_S,
    acknowledged,
    records,
    write_atomically,
)
from tests.support import consumerprocesses
from tests.support.consumerfakes import configmap
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.operator import wait_for

ATTEMPTS = 3
#: The kubelet's restarts the test allows: the deaths the policy counts, and some to spare.
RESTARTS = ATTEMPTS + 3


def test_a_handler_that_kills_its_process_is_dead_lettered_after_max_attempts_deaths(
    consumer_emulator: Any, azurite: Any, blob_container: Any, tmp_path: Path
) -> None:
    cs = consumer_emulator.connection_string()
    container = blob_container.container_name
    # Partition 1 gets its events only once the poison is contained: a batch of it in the
    # handler beside the poison's at a death would make that death count for neither (either
    # may be the killer, `crashmarkers`), and the deaths counted would vary from run to run.
    asyncio.run(send_events(cs, "orders", {"0": 100}))
    assignment = tmp_path / "assignment.json"
    acks = tmp_path / "acks.json"
    write_atomically(
        assignment,
        configmap(
            1,
            {"0": (1, "owned"), "1": (1, "owned")},
            checkpointContainer=container,
            processing=json.dumps({"maxAttempts": ATTEMPTS, "onFailure": "deadLetter"}),
        ),
    )
    env = consumerprocesses.file_consumer_env(
        tmp_path,
        eventhub=cs,
        blob=azurite.connection_string,
        extra={
            "EHB_TEST_RECORD_DIR": str(tmp_path),
            "EHB_TEST_CRASH_AT": "0:42",
        },
    )
    command = consumerprocesses.consume_command(
        "crashing:process",
        "--pod-name",
        "pod-a",
        "--assignment-file",
        str(assignment),
        "--ack-file",
        str(acks),
        "--batch-size",
        "20",
    )
    done = tmp_path / "pod-a.log"
    log = tmp_path / "consumer.stderr"
    deaths = 0
    process: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(RESTARTS + 1):
            with open(log, "ab") as out:
                process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
            deadline = time.monotonic() + WAIT_S
            while process.poll() is None and time.monotonic() < deadline:
                if past_the_poison(records(done)):
                    break
                time.sleep(0.2)
            if process.poll() is None:
                break  # alive: contained, or stuck (the assertions below tell which)
            deaths += 1
        assert process is not None
        assert process.poll() is None, (
            f"the process died {deaths} times on the same batch and never got past it"
        )
        asyncio.run(send_events(cs, "orders", {"0": 10, "1": 10}))
        wait_for(
            lambda: {("0", 109), ("1", 9)} <= set(records(done)),
            timeout=WAIT_S,
            what="the events sent after it",
        )
        wait_for(
            lambda: configmaps.parse_applied_generation(acknowledged(acks)) == 1,
            timeout=WAIT_S,
            what="generation 1 applied",
        )
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        print(log.read_text(errors="replace")[-6000:])
    assert deaths == ATTEMPTS
    letters = asyncio.run(dead_letters(azurite.connection_string, container))
    assert list(letters) == ["0"], letters
    body = letters["0"]
    assert (body["attempts"], body["pod"], body["epoch"]) == (ATTEMPTS, "pod-a", 1)
    assert "died in the handler" in body["error"]
    dead = {(e["partition"], e["sequenceNumber"]) for e in body["events"]}
    assert ("0", 42) in dead
    # Nothing of the dead batch reached a handler that returned, and nothing else was skipped.
    processed = set(records(done))
    assert not dead & processed
    assert dead | processed == {("0", n) for n in range(110)} | {("1", n) for n in range(10)}


def past_the_poison(processed: list[tuple[str, int]]) -> bool:
    """A batch after the one that kills the process was processed (that one never is)."""
    return any(p == "0" and n > 42 for p, n in processed)


async def dead_letters(connection_string: str, container: str) -> dict[str, dict[str, Any]]:
    """partition -> the body of its one dead letter."""
    found: dict[str, dict[str, Any]] = {}
    async with blobs.open_container(
        container_name=container, connection_string=connection_string
    ) as client:
        async for blob in client.list_blobs():
            if "/deadletter/" not in blob.name:
                continue
            body = json.loads(await (await client.download_blob(blob.name)).readall())
            assert body["events"][0]["partition"] not in found, "one dead letter per partition"
            found[body["events"][0]["partition"]] = body
    return found
