"""How fast the azure-eventhub SDK sends through the Event Hubs emulator and receives back.

The emulator runs in its own process (``ehb local eventhubs``), as it would beside a test
run. One aio SDK client process costs about 56 µs of CPU per received event and sleeps 50 ms
after every read loop on a link, so a single client process measures the SDK more than the
emulator; ``clients`` runs that many SDK client processes side by side, each with its own
share of the partitions (one producer and one receiver per partition), started together at
a barrier. A figure is the events of all clients over the span from the first client's
start to the last client's end, so it is what the emulator served to the real SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

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
    #: SDK client processes that shared the partitions.
    clients: int = 1
    prefetch: int = PREFETCH


@dataclasses.dataclass(frozen=True)
class Spans:
    """When one client's phases started and ended (``time.monotonic``, shared by processes)."""

    send_started: float
    send_ended: float
    receive_started: float
    receive_ended: float


class _Barrier(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...


def shares(events: int, partitions: int) -> list[int]:
    """Events per partition: as even as possible, the first partitions take the remainder."""
    return [events // partitions + (1 if p < events % partitions else 0) for p in range(partitions)]


def partitions_of(client: int, *, clients: int, partitions: int) -> list[int]:
    """The partitions client ``client`` sends to and receives from (round robin)."""
    return list(range(client, partitions, clients))


def combine(spans: Sequence[Spans], *, events: int) -> tuple[float, float]:
    """Send and receive events/s over the union of all clients' spans."""
    send_s = max(s.send_ended for s in spans) - min(s.send_started for s in spans)
    receive_s = max(s.receive_ended for s in spans) - min(s.receive_started for s in spans)
    return events / send_s, events / receive_s


@contextlib.contextmanager
def emulator_process(*, hub: str, partitions: int) -> Iterator[str]:
    """``ehb local eventhubs`` in a child process; yields its connection string."""
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
            f"{hub}={partitions}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline and not line.startswith("Endpoint="):
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
        if not line.startswith("Endpoint="):
            raise RuntimeError("the Event Hubs emulator did not start")
        yield line.strip()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def run(*, events: int, partitions: int, clients: int = 1, prefetch: int = PREFETCH) -> Figures:
    """Start an emulator process, send ``events``, receive them back, stop it."""
    if not 1 <= clients <= partitions:
        raise ValueError(f"clients must be 1 to {partitions} (the partitions), not {clients}")
    with emulator_process(hub=HUB, partitions=partitions) as line:
        connection_string = f"{line};EntityPath={HUB}"
        per_partition = shares(events, partitions)
        if clients == 1:
            spans = [
                asyncio.run(
                    _client(connection_string, per_partition, list(range(partitions)), prefetch)
                )
            ]
        else:
            spans = _in_processes(connection_string, per_partition, clients, prefetch)
    send_rate, receive_rate = combine(spans, events=events)
    return Figures(
        send_events_per_s=send_rate,
        receive_events_per_s=receive_rate,
        events=events,
        partitions=partitions,
        clients=clients,
        prefetch=prefetch,
    )


def _in_processes(
    connection_string: str, per_partition: list[int], clients: int, prefetch: int
) -> list[Spans]:
    # spawn, not fork: the parent may hold threads and event loops a fork would copy.
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(clients)
    results: multiprocessing.Queue[Spans | str] = context.Queue()
    workers = [
        context.Process(
            target=_client_process,
            args=(
                connection_string,
                per_partition,
                partitions_of(client, clients=clients, partitions=len(per_partition)),
                prefetch,
                barrier,
                results,
            ),
            daemon=True,
        )
        for client in range(clients)
    ]
    for worker in workers:
        worker.start()
    try:
        spans: list[Spans] = []
        deadline = time.monotonic() + 3 * PHASE_TIMEOUT_S
        while len(spans) < clients:
            try:
                answer = results.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError("an SDK client process did not finish in time") from None
            if isinstance(answer, str):
                raise RuntimeError(f"an SDK client process failed: {answer}")
            spans.append(answer)
        return spans
    finally:
        barrier.abort()  # frees any client still waiting for one that failed
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=10)


def _client_process(
    connection_string: str,
    per_partition: list[int],
    mine: list[int],
    prefetch: int,
    barrier: _Barrier,
    results: multiprocessing.Queue[Spans | str],
) -> None:
    try:
        results.put(asyncio.run(_client(connection_string, per_partition, mine, prefetch, barrier)))
    except BaseException as e:  # reported to the parent, which raises it
        results.put(f"{type(e).__name__}: {e}")


async def _together(barrier: _Barrier | None) -> None:
    """Wait until every client reached this point (off the loop: the SDK keeps running)."""
    if barrier is not None:
        await asyncio.to_thread(barrier.wait, PHASE_TIMEOUT_S)


async def _client(
    connection_string: str,
    per_partition: list[int],
    mine: list[int],
    prefetch: int,
    barrier: _Barrier | None = None,
) -> Spans:
    """Send this client's partitions' shares, then receive them back; return the spans."""
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

    body = b"x" * BODY_BYTES
    producers = {p: EventHubProducerClient.from_connection_string(connection_string) for p in mine}
    # Open the links first: the SDK takes about a second per link to open.
    for partition, producer in producers.items():
        await producer.send_batch([EventData(b"warm-up")], partition_id=str(partition))

    async def batch_of(producer: Any, partition: int, most: int) -> tuple[Any, int]:
        batch = await producer.create_batch(partition_id=str(partition))
        while len(batch) < most:
            try:
                batch.add(EventData(body))
            except ValueError:
                break
        return batch, len(batch)

    async def send(partition: int, producer: Any) -> None:
        # Every full batch holds the same events, so one is encoded and sent repeatedly: the
        # SDK's per-event encoding (batch.add) is then off the clock, the emulator's is not.
        wanted = per_partition[partition]
        full, size = await batch_of(producer, partition, wanted)
        sent = 0
        while wanted - sent >= size:
            await producer.send_batch(full)
            sent += size
        if sent < wanted:
            rest, _ = await batch_of(producer, partition, wanted - sent)
            await producer.send_batch(rest)

    await _together(barrier)
    send_started = time.monotonic()
    await asyncio.wait_for(
        asyncio.gather(*(send(p, producer) for p, producer in producers.items())),
        PHASE_TIMEOUT_S,
    )
    send_ended = time.monotonic()
    for producer in producers.values():
        await producer.close()
    # Receivers start when every client has sent: sending and receiving do not share CPU.
    await _together(barrier)

    consumers = {
        p: EventHubConsumerClient.from_connection_string(
            connection_string, consumer_group="$Default", load_balancing_interval=1
        )
        for p in mine
    }
    expected = sum(per_partition[p] for p in mine) + len(mine)  # the warm-up events too
    received = 0
    done = asyncio.Event()
    first_event: list[float] = []

    async def on_batch(context: Any, batch: list[Any]) -> None:
        nonlocal received
        if not first_event:
            first_event.append(time.monotonic())
        received += len(batch)
        if received >= expected:
            done.set()

    tasks = [
        asyncio.create_task(
            consumer.receive_batch(
                on_batch,
                partition_id=str(p),
                starting_position="-1",
                max_batch_size=prefetch,
                prefetch=prefetch,
            )
        )
        for p, consumer in consumers.items()
    ]
    try:
        await asyncio.wait_for(done.wait(), PHASE_TIMEOUT_S)
        receive_ended = time.monotonic()
    finally:
        for consumer in consumers.values():
            await consumer.close()
        for task in tasks:
            await asyncio.wait_for(task, 30)
    # Timed from the first event, so that the SDK's link set-up is not counted.
    return Spans(
        send_started=send_started,
        send_ended=send_ended,
        receive_started=first_event[0],
        receive_ended=receive_ended,
    )
