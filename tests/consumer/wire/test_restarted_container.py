"""A consumer container restarted in place, through the real CLI on the local stack.

The same pod name and assignment (the ConfigMap is a file here), a new process: the first is
killed (SIGKILL, as the OOM killer or the kubelet does) while its handler is between
effects and checkpoint; the second takes the same partitions at the same epochs, from their
checkpoints, on the Event Hubs emulator and Azurite. Every event is processed, none skipped,
and the restart costs one in-flight batch per partition at most.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

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


def test_a_killed_container_resumes_at_the_same_epochs_from_its_checkpoints(
    consumer_emulator: Any, azurite: Any, blob_container: Any, tmp_path: Path
) -> None:
    cs = consumer_emulator.connection_string()
    container = blob_container.container_name
    asyncio.run(send_events(cs, "orders", {"0": 300, "1": 300}))
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
        extra={"EHB_TEST_RECORD_DIR": str(tmp_path), "EHB_TEST_HANDLER_SECONDS": "0.3"},
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
        "50",
    )
    done = tmp_path / "pod-a.log"
    log = tmp_path / "consumer.stderr"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with open(log, "ab") as out:
            processes.append(subprocess.Popen(command, env=env, stdout=out, stderr=out))
        wait_for(lambda: len(records(done)) >= 200, timeout=WAIT_S, what="some batches")
        processes[0].kill()
        processes[0].wait(timeout=10)
        before = set(records(done))
        acks.unlink()  # to see the new process's own answer
        with open(log, "ab") as out:
            restarted = time.monotonic()
            processes.append(subprocess.Popen(command, env=env, stdout=out, stderr=out))
        wait_for(
            lambda: configmaps.parse_applied_generation(acknowledged(acks)) == 1,
            timeout=WAIT_S,
            what="generation 1 applied by the restarted process",
        )
        taken_up = time.monotonic() - restarted
        wait_for(lambda: set(records(done)) >= expected(), timeout=WAIT_S, what="the backlog")
        asyncio.run(send_events(cs, "orders", {"0": 20, "1": 20}))
        wait_for(lambda: set(records(done)) >= expected(320), timeout=WAIT_S, what="the news")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        print(log.read_text(errors="replace")[-4000:])
    assert taken_up < 15, f"the restarted process took {taken_up:.1f} s to take its partitions up"
    processed = records(done)
    assert set(processed) == expected(320)
    # The kill repeats at most the batch in each partition's handler: 50 events each.
    repeated = len(processed) - len(set(processed))
    assert repeated <= 2 * 50, repeated
    assert configmaps.parse_released(acknowledged(acks)) == {}
    assert before <= set(processed)


def expected(count: int = 300) -> set[tuple[str, int]]:
    return {(p, n) for p in "01" for n in range(count)}
