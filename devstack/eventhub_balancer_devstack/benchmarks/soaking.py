"""A consumer pod under steady traffic for minutes: does what it holds stay flat?

A pod runs for weeks; a leak of 70 bytes per event is invisible in a one-minute benchmark and
kills a pod with a 512 MiB limit within hours. The soak runs ``ehb consume`` as a process of
its own (as a pod runs it: the recording handler, a file as its assignment, the local
emulator and Azurite), sends it ``rate`` events/s with the scenarios' producer, and samples
every few seconds what the consumer holds over its whole process tree (in Spark mode the
JVM and the Python workers are its children): resident memory, threads, open descriptors.

Growth is the least-squares slope over the second half of the run: the first half holds the
start-up (imports, the SDK's links, the JVM's heap sizing), which is not what grows for
weeks. Lost and duplicate events come from the handler's records (``recording``) against what
the emulator holds, after the traffic stopped and the consumer caught up.

The emulator runs in a child process (``emulator.emulator_process``), so its work and memory
are neither in the consumer's tree nor behind the producer's GIL. In Spark mode the consumer
imports this module for its handler (`record_trigger`), so the stack's heavier modules (the
scenarios' systems bring kopf) are imported where the run needs them, not here: they would
sit in the measured process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from eventhub_balancer import errors
from eventhub_balancer.adapters import partitionbounds, receiving
from eventhub_balancer.consumer import contexts
from eventhub_balancer_devstack import azurite, recording
from eventhub_balancer_devstack.benchmarks import emulator, processsamples
from eventhub_balancer_devstack.scenarios import producing

logger = logging.getLogger(__name__)

HUB = "soak"
CONTAINER = "soak"
POD = "soak-pod"
#: What the checkpoint blobs are named after (the CR's ``fullyQualifiedNamespace``).
FULLY_QUALIFIED_NAMESPACE = "soak.servicebus.windows.net"
#: The project's targets (docs/benchmarks.md), in MB of resident memory per minute over the
#: second half: plain mode, and Spark mode summed over the JVM and the Python processes.
TARGET_RSS_MB_PER_MIN = 0.2
TARGET_SPARK_RSS_MB_PER_MIN = 1.0
#: The growth targets (the memory slope, flat threads and descriptors) are judged only on runs
#: this long or longer, the recorded soaks' length: a shorter second half holds the start-up
#: more than growth, and 0.2 MB/min adds less there than a sample's noise.
JUDGED_SECONDS = 600.0
NOT_JUDGED = (
    f"the growth targets are judged only on runs of {JUDGED_SECONDS:g} s or more: a shorter "
    "run's slopes hold its start-up"
)
#: The longest wait for the consumer to read its assignment and open its links (Spark mode
#: receives while its session starts, so the same bound holds).
START_TIMEOUT_S = 60.0
#: The longest wait, once the traffic stopped, for the consumer to process what was sent.
DRAIN_TIMEOUT_S = 120.0
#: The consumer's graceful stop (its final checkpoints), then it is killed.
STOP_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    seconds: float = 600.0
    rate: float = 1000.0
    partitions: int = 4
    spark: bool = False
    #: Seconds between two samples of the consumer's process tree.
    sample_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.rate <= 0 or self.sample_seconds <= 0:
            raise errors.InvalidInput("soak", "--seconds, --rate and the sampling must be > 0")
        if self.partitions < 1:
            raise errors.InvalidInput("--partitions", "must be at least 1")


class Report(TypedDict):
    mode: str
    seconds: float
    rate: float
    partitions: int
    sample_seconds: float
    sent: int
    processed: int
    #: Whether the consumer caught up with everything sent within `DRAIN_TIMEOUT_S` of the
    #: traffic's end; if not, ``lost`` counts events that may only be late.
    drained: bool
    lost: int
    duplicates: int
    #: Resident memory (MB) at the start of the second half and at the end.
    rss_mb_mid: float
    rss_mb_end: float
    slopes: processsamples.Slopes
    target_rss_mb_per_min: float
    #: The slope within the target, flat threads and descriptors, nothing lost or duplicated.
    #: None: a run shorter than `JUDGED_SECONDS` that lost and duplicated nothing; its growth
    #: is not judged (``not_judged`` says why), neither met nor missed.
    ok: bool | None
    not_judged: NotRequired[str]
    samples: processsamples.Series


# -- the Spark handler


def record_trigger(df: Any, context: contexts.TriggerContext) -> None:
    """The Spark soak's handler: one job reads every row's position, recorded per partition
    as the plain handler (``recording.process``) records a batch."""
    rows = df.select("partition", "sequence_number").collect()
    numbers: dict[str, list[int]] = {}
    for row in rows:
        numbers.setdefault(row["partition"], []).append(row["sequence_number"])
    for partition, sequence_numbers in numbers.items():
        recording.append(
            os.environ[recording.ENV_RECORD_DIR],
            pod=context.pod,
            partition=partition,
            epoch=context.partitions[partition].epoch,
            sequence_numbers=sequence_numbers,
        )


# -- the run


def assignment(*, partitions: int) -> dict[str, Any]:
    """Every partition to the one pod, as its ConfigMap would say (``--assignment-file``)."""
    return {
        "data": {
            "fullyQualifiedNamespace": FULLY_QUALIFIED_NAMESPACE,
            "eventHubName": HUB,
            "consumerGroup": "$Default",
            "checkpointContainer": CONTAINER,
            "startPosition": json.dumps("earliest"),
            "generation": "1",
            "partitions": json.dumps(
                {str(p): {"epoch": 1, "state": "owned"} for p in range(partitions)}
            ),
        }
    }


def consumer_command(*, assignment_file: Path, port: int, spark: bool) -> list[str]:
    handler = f"{__name__}:record_trigger" if spark else f"{recording.__name__}:process"
    return [
        sys.executable,
        "-m",
        "eventhub_balancer",
        "consume",
        "--handler",
        handler,
        "--pod-name",
        POD,
        "--consumer",
        "soak",
        "--assignment-file",
        str(assignment_file),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(["--spark"] if spark else []),
    ]


@contextlib.contextmanager
def consumer_process(
    command: Sequence[str], *, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """The consumer, its output on our stderr (stdout is the report's)."""
    process = subprocess.Popen(
        list(command), stdout=sys.stderr, stderr=sys.stderr, env=env, start_new_session=True
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            logger.warning("the consumer did not stop within %.0f s: killed", STOP_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)
        if process.returncode not in (0, -signal.SIGKILL):
            logger.warning("the consumer exited with %s", process.returncode)


async def _produced(connection_string: str, partitions: int) -> dict[str, int]:
    """Events the emulator holds per partition (sequence numbers from 0)."""
    address = receiving.EventHubAddress(
        fully_qualified_namespace=FULLY_QUALIFIED_NAMESPACE,
        eventhub_name=HUB,
        connection_string=connection_string,
    )
    produced = {}
    for p in range(partitions):
        bounds = await partitionbounds.partition_bounds(address, str(p))
        produced[str(p)] = 0 if bounds.empty else bounds.last_sequence_number + 1
    return produced


async def _wait_ready(port: int, *, process: subprocess.Popen[bytes]) -> None:
    from eventhub_balancer_devstack.scenarios import systems

    deadline = time.monotonic() + START_TIMEOUT_S
    while not await asyncio.to_thread(
        systems.answers_readyz, port, not_yet=systems.NO_ASSIGNMENT_YET
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the consumer was not up within {START_TIMEOUT_S:.0f} s")
        if process.poll() is not None:
            raise errors.TransientError("the consumer ended before it was up")
        await asyncio.sleep(0.2)


async def _sample(
    process: subprocess.Popen[bytes], settings: Settings, series: processsamples.Series
) -> None:
    began = time.monotonic()
    end = began + settings.seconds
    while True:
        now = time.monotonic()
        held = processsamples.usage(processsamples.process_tree(process.pid))
        if process.poll() is not None:
            raise errors.TransientError("the consumer ended during the soak")
        series["t_s"].append(round(now - began, 1))
        series["rss_mb"].append(round(held.rss_bytes / 2**20, 2))
        series["threads"].append(held.threads)
        series["descriptors"].append(held.descriptors)
        series["processes"].append(held.processes)
        logger.info(
            "%5.0f s: %.1f MB, %d threads, %d descriptors, %d processes",
            now - began,
            held.rss_bytes / 2**20,
            held.threads,
            held.descriptors,
            held.processes,
        )
        if now >= end:
            return
        await asyncio.sleep(min(settings.sample_seconds, max(0.0, end - time.monotonic())))


async def _drain(reader: recording.RecordReader, tally: recording.Tally, total: int) -> bool:
    """Whether the consumer processed ``total`` events before `DRAIN_TIMEOUT_S`."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        tally.add(reader.read_new())
        if tally.processed >= total:
            return True
        if time.monotonic() > deadline:
            logger.warning("the consumer is %d events behind: gave up", total - tally.processed)
            return False
        await asyncio.sleep(0.5)


async def _soak(settings: Settings, work: Path) -> Report:
    from eventhub_balancer_devstack.scenarios import systems

    series: processsamples.Series = {
        "t_s": [],
        "rss_mb": [],
        "threads": [],
        "descriptors": [],
        "processes": [],
    }
    records = work / "records"
    records.mkdir()
    assignment_file = work / "assignment.json"
    assignment_file.write_text(json.dumps(assignment(partitions=settings.partitions)))
    with (
        azurite.Azurite() as blob_service,
        emulator.emulator_process(hub=HUB, partitions=settings.partitions) as eventhubs,
    ):
        await systems.ensure_container(blob_service.connection_string, CONTAINER)
        port = azurite.free_port()
        env = {
            **os.environ,
            "EHB_EVENTHUB_CONNECTION_STRING": eventhubs,
            "EHB_BLOB_CONNECTION_STRING": blob_service.connection_string,
            "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true",
            recording.ENV_RECORD_DIR: str(records),
            "PYTHONUNBUFFERED": "1",
        }
        command = consumer_command(assignment_file=assignment_file, port=port, spark=settings.spark)
        with consumer_process(command, env=env) as consumer:
            await _wait_ready(port, process=consumer)
            ids = [str(p) for p in range(settings.partitions)]
            producer = producing.Producer(
                connection_string=eventhubs, hub=HUB, rate=settings.rate, partitions=lambda: ids
            )
            sending = asyncio.create_task(producer.run())
            try:
                await _sample(consumer, settings, series)
            finally:
                producer.stop()
                await sending
            produced = await _produced(eventhubs, settings.partitions)
            reader, tally = recording.RecordReader(records), recording.Tally()
            drained = await _drain(reader, tally, sum(produced.values()))
    tally.add(reader.read_new())  # what the final checkpoints' batches recorded
    return _report(
        settings, series, sent=producer.sent, tally=tally, produced=produced, drained=drained
    )


def _report(
    settings: Settings,
    series: processsamples.Series,
    *,
    sent: int,
    tally: recording.Tally,
    produced: dict[str, int],
    drained: bool,
) -> Report:
    slopes = processsamples.second_half_slopes(series, seconds=settings.seconds)
    target = TARGET_SPARK_RSS_MB_PER_MIN if settings.spark else TARGET_RSS_MB_PER_MIN
    lost = len(tally.missing(produced))
    half = next(i for i, t in enumerate(series["t_s"]) if t >= settings.seconds / 2)
    delivered = drained and lost == 0 and tally.duplicates == 0
    growth = growth_met(slopes, target=target, seconds=settings.seconds, run=settings.seconds)
    report: Report = {
        "mode": "spark" if settings.spark else "plain",
        "seconds": settings.seconds,
        "rate": settings.rate,
        "partitions": settings.partitions,
        "sample_seconds": settings.sample_seconds,
        "sent": sent,
        "processed": tally.processed,
        "drained": drained,
        "lost": lost,
        "duplicates": tally.duplicates,
        "rss_mb_mid": series["rss_mb"][half],
        "rss_mb_end": series["rss_mb"][-1],
        "slopes": slopes,
        "target_rss_mb_per_min": target,
        "ok": growth if delivered else False,
        "samples": series,
    }
    if growth is None:
        report["not_judged"] = NOT_JUDGED
    return report


def growth_met(
    slopes: processsamples.Slopes, *, target: float, seconds: float, run: float
) -> bool | None:
    """The growth targets over a second half of ``seconds``: the memory slope within
    ``target`` MB/min, threads and descriptors flat. None: a ``run`` shorter than
    `JUDGED_SECONDS`, not judged."""
    if run < JUDGED_SECONDS:
        return None

    def flat(value: float | None) -> bool:
        # The slope adds less than `processsamples.FLAT_COUNT` over the second half: a pool
        # that starts one more thread once is not a leak; a thread or descriptor per trigger
        # adds hundreds.
        return value is not None and abs(value) * seconds / 120 < processsamples.FLAT_COUNT

    rss = slopes["rss_mb_per_min"]
    return (
        rss is not None
        and rss <= target
        and flat(slopes["threads_per_min"])
        and flat(slopes["descriptors_per_min"])
    )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(settings: Settings) -> Report:
    # A soak is long and runs in the background, bounded by `timeout`: its SIGTERM unwinds
    # like ^C, so that the consumer, the emulator and Azurite are stopped, not orphaned.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with tempfile.TemporaryDirectory(prefix="ehb-soak-") as work:
            return asyncio.run(_soak(settings, Path(work)))
    finally:
        signal.signal(signal.SIGTERM, previous)
