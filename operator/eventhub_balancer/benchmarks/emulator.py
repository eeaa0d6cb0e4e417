"""How fast the azure-eventhub SDK sends through the Event Hubs emulator and receives back.

The emulator runs in its own process (``ehb local eventhubs``), as it would beside a test
run, so that the figures are the SDK's and the emulator's on separate cores; the SDK side
is the aio client, one producer and one receiver per partition, since the SDK's per-link
loop (a 50 ms sleep between reads) caps what a single link can take.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from typing import Any

#: Event body size the figures are quoted for.
BODY_BYTES = 100
#: Receive credit per link: with the SDK's 50 ms pause per read loop, credit bounds a link's
#: rate (credit / 50 ms), so it is set well above the target rate.
PREFETCH = 3000
#: The longest any phase may take before the benchmark gives up.
PHASE_TIMEOUT_S = 300.0
STARTUP_TIMEOUT_S = 30.0
HUB = "bench"


@dataclasses.dataclass(frozen=True)
class Figures:
    """Events per second each way, and what was measured."""

    send_events_per_s: float
    receive_events_per_s: float
    events: int
    partitions: int


def run(*, events: int, partitions: int) -> Figures:
    """Start an emulator process, send ``events``, receive them back, stop it."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "local",
            "eventhubs",
            "--port",
            "0",
            "--hub",
            f"{HUB}={partitions}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        line = process.stdout.readline().strip()
        if not line.startswith("Endpoint=") or time.monotonic() > deadline:
            raise RuntimeError(f"the emulator did not start: {line!r}")
        return asyncio.run(_measure(f"{line};EntityPath={HUB}", events, partitions))
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def _measure(connection_string: str, events: int, partitions: int) -> Figures:
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

    body = b"x" * BODY_BYTES
    share = [
        events // partitions + (1 if p < events % partitions else 0) for p in range(partitions)
    ]
    producers = [EventHubProducerClient.from_connection_string(connection_string) for _ in share]
    # Open the links first: the SDK takes about a second per link to open.
    for index, producer in enumerate(producers):
        await producer.send_batch([EventData(b"warm-up")], partition_id=str(index))

    async def send(index: int, producer: Any) -> None:
        sent = 0
        while sent < share[index]:
            batch = await producer.create_batch(partition_id=str(index))
            while sent < share[index]:
                try:
                    batch.add(EventData(body))
                except ValueError:
                    break
                sent += 1
            await producer.send_batch(batch)

    started = time.perf_counter()
    await asyncio.wait_for(
        asyncio.gather(*(send(i, p) for i, p in enumerate(producers))), PHASE_TIMEOUT_S
    )
    send_s = time.perf_counter() - started
    for producer in producers:
        await producer.close()

    consumers = [
        EventHubConsumerClient.from_connection_string(
            connection_string, consumer_group="$Default", load_balancing_interval=1
        )
        for _ in share
    ]
    received = [0] * partitions
    done = asyncio.Event()
    first_event: list[float] = []

    def handler(index: int) -> Any:
        async def on_batch(context: Any, batch: list[Any]) -> None:
            if not first_event:
                first_event.append(time.perf_counter())
            received[index] += len(batch)
            if sum(received) >= events + partitions:  # the warm-up events too
                done.set()

        return on_batch

    tasks = [
        asyncio.create_task(
            consumer.receive_batch(
                handler(index),
                partition_id=str(index),
                starting_position="-1",
                max_batch_size=PREFETCH,
                prefetch=PREFETCH,
            )
        )
        for index, consumer in enumerate(consumers)
    ]
    try:
        await asyncio.wait_for(done.wait(), PHASE_TIMEOUT_S)
        # Timed from the first event, so that the SDK's link set-up is not counted.
        receive_s = time.perf_counter() - first_event[0]
    finally:
        for consumer in consumers:
            await consumer.close()
        for task in tasks:
            await asyncio.wait_for(task, 30)
    return Figures(
        send_events_per_s=events / send_s,
        receive_events_per_s=events / receive_s,
        events=events,
        partitions=partitions,
    )
