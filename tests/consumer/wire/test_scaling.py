"""End to end on the local stack: the real operator, consumers as separate processes.

As in a cluster: the operator (kopf, in a thread) watches the EventHubConsumer and the pods
in the local Kubernetes API; each consumer pod is an ``ehb consume`` process that watches its
ConfigMap, receives from the Event Hubs emulator (a child process) and checkpoints into
Azurite. The test plays the kubelet: it mirrors each process's /readyz into its Pod's Ready
condition, marks pods terminating and sends SIGTERM (or SIGKILL). One run uses the Spark
pipeline (``ehb consume --spark``, the example ``minute_counts`` pipeline on a local[1]
SparkSession per pod).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import blobs, checkpointing
from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack.benchmarks import consuming, emulator
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support import paths
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.operator import CR, Stack, wait_for
from tests.support.fixtures.spark import SMALL_DRIVER_ARGS, spark_unavailable

pytestmark = pytest.mark.slow

EXAMPLES = paths.EXAMPLES
NAMESPACE = "shop"
FQNS = "shop.servicebus.windows.net"
PARTITIONS = 16
BATCH_SIZE = 100
#: The Spark run: fewer partitions and events (a Spark batch costs 0.1-1 s here), bigger
#: batches, and a small single-core driver per pod.
SPARK_PARTITIONS = 4
SPARK_BATCH_SIZE = 250
SPARK_ARGS = SMALL_DRIVER_ARGS
#: The test's kubelet probes /readyz like a kubelet does: a probe slower than this fails, and
#: only failing for this long turns a Ready pod NotReady. A busy pod on a loaded machine
#: answers late now and then, and a pod applying a generation (releasing partitions, which
#: writes their checkpoints) answers 503 until it is done: neither must move its partitions.
#: A kubelet's defaults (every 10 s, 3 failures) take 30 s; this kubelet probes every 0.2 s.
PROBE_TIMEOUT_S = 3.0
PROBE_FAILURE_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmulatorProcess:
    """Stands in for the emulator object ``Stack`` expects (only its connection string)."""

    def __init__(self, connection_string: str) -> None:
        self._cs = connection_string

    def connection_string(self, hub: str | None = None) -> str:
        return self._cs if hub is None else f"{self._cs};EntityPath={hub}"


class Consumers:
    """Consumer pods: a Pod object and an ``ehb consume`` process each, and a kubelet loop."""

    def __init__(
        self,
        stack: Stack,
        *,
        eventhubs: str,
        blob: str,
        records: Path,
        kubeconfig: Path,
        spark: bool = False,
        output: Path | None = None,
    ) -> None:
        self.stack = stack
        self.eventhubs = eventhubs
        self.blob = blob
        self.records = records
        self.kubeconfig = kubeconfig
        self.spark = spark
        self.output = output
        #: Seconds the recording handler works on after recording a batch (0: none).
        self.handler_seconds = 0.0
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.ready: dict[str, bool] = {}
        self._stop = threading.Event()
        self._kubelet = threading.Thread(target=self._mirror_readiness, daemon=True)
        self._kubelet.start()

    def start(self, pod: str) -> None:
        self.stack.pod(NAMESPACE, pod, app="consumer", ready=False)
        self.ready[pod] = False
        port = self.ports[pod] = free_port()
        env = {
            **os.environ,
            "POD_NAME": pod,
            "POD_NAMESPACE": NAMESPACE,
            "EHB_CONSUMER": "orders",
            "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true",
            "EHB_EVENTHUB_CONNECTION_STRING": self.eventhubs,
            "EHB_BLOB_CONNECTION_STRING": self.blob,
            "EHB_TEST_RECORD_DIR": str(self.records),
            "EHB_TEST_HANDLER_SECONDS": str(self.handler_seconds),
            "KUBECONFIG": str(self.kubeconfig),
        }
        if self.output is not None:
            env["MINUTE_COUNTS_OUTPUT"] = str(self.output)
        handler = ["spark_recording:process", *SPARK_ARGS] if self.spark else ["recording:process"]
        command = [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "-v",
            "consume",
            "--handler",
            *handler,
            "--handler-path",
            str(paths.HANDLERS),
            "--handler-path",
            str(EXAMPLES),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--batch-size",
            str(SPARK_BATCH_SIZE if self.spark else BATCH_SIZE),
            "--max-wait",
            "0.2",
            "--shutdown-timeout",
            "15",
        ]
        with open(self.records / f"{pod}.stderr", "wb") as log:  # the child holds its own copy
            self.processes[pod] = subprocess.Popen(command, env=env, stdout=log, stderr=log)

    def _readyz(self, pod: str) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.ports[pod]}/readyz", timeout=PROBE_TIMEOUT_S
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def _mirror_readiness(self) -> None:
        failing_since: dict[str, float] = {}
        while not self._stop.wait(0.2):
            for pod in list(self.processes):
                process = self.processes.get(pod)
                if process is None or process.poll() is not None:
                    continue
                if self._readyz(pod):
                    failing_since.pop(pod, None)
                    now = True
                else:
                    since = failing_since.setdefault(pod, time.monotonic())
                    # Not ready yet (never was), or failing for long enough to count.
                    now = self.ready.get(pod, False) and time.monotonic() - since < PROBE_FAILURE_S
                if now != self.ready.get(pod):
                    with contextlib.suppress(Exception):
                        self.stack.set_ready(NAMESPACE, pod, now)
                        self.ready[pod] = now

    def terminate(self, pod: str) -> None:
        """A graceful pod deletion: deletionTimestamp set, SIGTERM, wait, gone."""
        self.stack.terminate(NAMESPACE, pod)
        process = self.processes.pop(pod)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, f"{pod} did not exit cleanly"
        self.stack.delete_pod(NAMESPACE, pod)

    def kill(self, pod: str) -> None:
        """The node dies: SIGKILL, then the pod object goes away."""
        process = self.processes.pop(pod)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        self.stack.delete_pod(NAMESPACE, pod)

    def close(self) -> None:
        self._stop.set()
        self._kubelet.join(5)
        for process in list(self.processes.values()):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def processed(self) -> collections.Counter[tuple[str, int]]:
        seen: collections.Counter[tuple[str, int]] = collections.Counter()
        for path in self.records.glob("*.log"):
            seen.update(self._lines(path))
        return seen

    def processed_by(self, pod: str) -> collections.Counter[tuple[str, int]]:
        return collections.Counter(self._lines(self.records / f"{pod}.log"))

    @staticmethod
    def _lines(path: Path) -> Iterator[tuple[str, int]]:
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            partition, sequence = line.split()
            yield partition, int(sequence)


class CheckpointWatch:
    """Samples every checkpoint blob while the test runs: they must never move backwards."""

    def __init__(self, blob_connection_string: str) -> None:
        self.cs = blob_connection_string
        self.regressions: list[str] = []
        self.last: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        async with blobs.open_container(
            container_name="checkpoints", connection_string=self.cs
        ) as c:
            store = checkpointing.CheckpointStore(
                c,
                fully_qualified_namespace=FQNS,
                eventhub_name=consuming.HUB,
                consumer_group="$Default",
                owner_id="watch",
            )
            while not self._stop.is_set():
                with contextlib.suppress(Exception):
                    for cp in await store.list():
                        before = self.last.get(cp.partition, -1)
                        if cp.sequence_number < before:
                            self.regressions.append(
                                f"{cp.partition}: {before} -> {cp.sequence_number}"
                            )
                        self.last[cp.partition] = max(before, cp.sequence_number)
                await asyncio.sleep(0.3)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


Running = tuple[Stack, Consumers, CheckpointWatch, str]


@contextlib.contextmanager
def running_stack(
    tmp_path: Path, azurite: Any, *, partitions_: int, spark: bool = False
) -> Iterator[Running]:
    kube = LocalKubeAPI().start()
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    records = tmp_path / "records"
    records.mkdir()
    with emulator.emulator_process(hub=consuming.HUB, partitions=partitions_) as eventhubs_cs:
        # The benchmark's emulator names its hub "bench": the CR points at that hub.
        stack = Stack(kube, EmulatorProcess(eventhubs_cs), kubeconfig)  # type: ignore[arg-type]
        asyncio.run(_fresh_container(azurite.connection_string))
        stack.secret(NAMESPACE, "eh", "cs", eventhubs_cs)
        stack.secret(NAMESPACE, "blob", "cs", azurite.connection_string)
        kube.create_object(CR, _consumer_cr(), namespace=NAMESPACE)
        stack.start_operator(namespaces=(NAMESPACE,))
        consumers = Consumers(
            stack,
            eventhubs=eventhubs_cs,
            blob=azurite.connection_string,
            records=records,
            kubeconfig=kubeconfig,
            spark=spark,
            output=tmp_path / "minute-counts" if spark else None,
        )
        watch = CheckpointWatch(azurite.connection_string)
        try:
            yield stack, consumers, watch, eventhubs_cs
        finally:
            consumers.close()
            watch.close()
            for operator in list(stack.operators):
                operator.stop()
            kube.stop()
            for log in sorted(records.glob("*.stderr")):
                tail = log.read_text(errors="replace").splitlines()[-15:]
                print(f"--- {log.name}\n" + "\n".join(tail))


@pytest.fixture
def local_stack(tmp_path: Path, azurite: Any) -> Iterator[Running]:
    with running_stack(tmp_path, azurite, partitions_=PARTITIONS) as running:
        yield running


@pytest.fixture
def spark_stack(tmp_path: Path, azurite: Any) -> Iterator[Running]:
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    with running_stack(tmp_path, azurite, partitions_=SPARK_PARTITIONS, spark=True) as running:
        yield running


async def _fresh_container(cs: str) -> None:
    async with blobs.open_container(container_name="checkpoints", connection_string=cs) as c:
        await blobs.ensure_container(c)
        async for item in c.list_blobs(name_starts_with=f"{FQNS}/"):
            await c.delete_blob(item.name)


def _consumer_cr() -> dict[str, Any]:
    return {
        "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
        "kind": specs.KIND,
        "metadata": {"name": "orders"},
        "spec": {
            "eventHub": {
                "fullyQualifiedNamespace": FQNS,
                "name": consuming.HUB,
                "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
            },
            "checkpointStore": {
                "containerName": "checkpoints",
                "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
            },
            "selector": {"matchLabels": {"app": "consumer"}},
            "startPosition": "earliest",
            "balancing": {"intervalSeconds": 2, "podGraceSeconds": 3, "handoffTimeoutSeconds": 20},
        },
    }


def produce(
    cs: str,
    total: int,
    *,
    rounds: int,
    partitions_: int = PARTITIONS,
    pause: float = 1.0,
    every: float | None = None,
) -> threading.Thread:
    """Send ``total`` events spread evenly over the partitions in ``rounds`` bursts, ``pause``
    seconds apart; or, with ``every``, one burst begun every ``every`` seconds (a burst that
    takes longer is followed at once), so that the rounds span ``rounds * every`` seconds
    however long a send takes (each opens its links anew: 1.5 s and more)."""
    per_round = total // partitions_ // rounds
    assert per_round * partitions_ * rounds == total, "choose rounds that divide the total"

    def main() -> None:
        began = time.monotonic()
        for i in range(rounds):
            asyncio.run(
                send_events(cs, consuming.HUB, {str(p): per_round for p in range(partitions_)})
            )
            if every is None:
                time.sleep(pause)
            else:
                time.sleep(max(0.0, began + (i + 1) * every - time.monotonic()))

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread


def owned_counts(stack: Stack) -> list[int]:
    return sorted(n for n in stack.counts(NAMESPACE).values() if n)


def test_scale_2_4_1_processes_every_event_once(
    local_stack: Running,
) -> None:
    stack, consumers, watch, cs = local_stack
    total = 50_000
    producer = produce(cs, total, rounds=5)  # 625 events per partition and round
    for pod in ("c1", "c2"):
        consumers.start(pod)
    wait_for(lambda: owned_counts(stack) == [8, 8], timeout=60, what="2 pods with 8 partitions")
    wait_for(lambda: len(consumers.processed()) > 5_000, timeout=60, what="progress")
    for pod in ("c3", "c4"):
        consumers.start(pod)
    wait_for(
        lambda: owned_counts(stack) == [4, 4, 4, 4], timeout=60, what="4 pods with 4 partitions"
    )
    wait_for(lambda: len(consumers.processed()) > 20_000, timeout=90, what="progress")
    for pod in ("c2", "c3", "c4"):
        consumers.terminate(pod)
    wait_for(lambda: owned_counts(stack) == [16], timeout=60, what="1 pod with 16 partitions")
    producer.join(timeout=120)
    assert not producer.is_alive()
    wait_for(lambda: len(consumers.processed()) >= total, timeout=120, what="every event processed")
    seen = consumers.processed()
    per_partition = total // PARTITIONS
    assert set(seen) == {(str(p), n) for p in range(PARTITIONS) for n in range(per_partition)}
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert duplicates == {}, f"{len(duplicates)} events processed more than once"
    final = {str(p): per_partition - 1 for p in range(PARTITIONS)}
    with contextlib.suppress(AssertionError):
        wait_for(lambda: watch.last == final, timeout=30, what="final checkpoints")
    assert watch.last == final
    assert watch.regressions == []


def test_a_killed_consumer_duplicates_at_most_its_unfinished_batch(
    local_stack: Running,
) -> None:
    stack, consumers, watch, cs = local_stack
    total = 16_000
    # A backlog and a handler that records its batch, then works 0.3 s before returning: at
    # the kill, each of the victim's partitions is almost surely between the two.
    consumers.handler_seconds = 0.3
    producer = produce(cs, total, rounds=1)
    for pod in ("k1", "k2"):
        consumers.start(pod)
    wait_for(lambda: owned_counts(stack) == [8, 8], timeout=60, what="2 pods with 8 partitions")
    producer.join(timeout=60)
    wait_for(lambda: len(consumers.processed()) > 4_000, timeout=90, what="progress")
    victim = stack.assignment(NAMESPACE)["k2"]
    consumers.kill("k2")
    wait_for(lambda: owned_counts(stack) == [16], timeout=60, what="k1 owns every partition")
    producer.join(timeout=120)
    wait_for(lambda: len(consumers.processed()) >= total, timeout=120, what="every event processed")
    seen = consumers.processed()
    per_partition = total // PARTITIONS
    assert set(seen) == {(str(p), n) for p in range(PARTITIONS) for n in range(per_partition)}
    twice: dict[str, list[int]] = collections.defaultdict(list)
    for (partition, sequence), n in sorted(seen.items()):
        assert n <= 2, f"{partition}/{sequence} processed {n} times"
        if n == 2:
            twice[partition].append(sequence)
    duplicated = {p: len(s) for p, s in twice.items()}
    # Only the killed pod's partitions, and per partition at most its last unfinished batch:
    # the one in its handler, or the one whose checkpoint write was in flight (the next
    # handler never starts before the previous checkpoint is durable).
    # Whether the kill lands inside a batch is timing (on a loaded machine the backlog may be
    # drained by then); what must hold either way is the bound below.
    assert set(duplicated) <= set(victim), (sorted(duplicated), sorted(victim))
    assert all(n <= BATCH_SIZE for n in duplicated.values()), duplicated
    for partition, sequences in twice.items():  # one batch: a contiguous run
        assert sequences == list(range(sequences[0], sequences[-1] + 1)), partition
    wait_for(lambda: len(watch.last) == PARTITIONS, timeout=30, what="checkpoints observed")
    assert watch.regressions == []
    print(f"duplicates per partition after SIGKILL: {dict(sorted(duplicated.items()))}")


@pytest.mark.spark
def test_spark_pipeline_scale_2_to_1_without_duplicates(spark_stack: Running) -> None:
    """``ehb consume --spark`` with the example pipeline: a planned scale-down moves partitions
    without a duplicate, in the records and in the Parquet sink alike."""
    import pyarrow.parquet as pq

    stack, consumers, watch, cs = spark_stack
    total = 4_000
    producer = produce(cs, total, rounds=4, partitions_=SPARK_PARTITIONS, pause=2.0)
    for pod in ("s1", "s2"):
        consumers.start(pod)
    # Each pod is Ready once its SparkSession is warm: two JVMs starting at once on a busy
    # 2-core machine took 62 s. The bound is for a session that never starts, not for speed.
    wait_for(lambda: owned_counts(stack) == [2, 2], timeout=180, what="2 pods with 2 partitions")
    wait_for(lambda: len(consumers.processed()) >= 1_000, timeout=60, what="progress")
    moved = set(stack.assignment(NAMESPACE)["s2"])
    consumers.terminate("s2")
    wait_for(lambda: owned_counts(stack) == [4], timeout=60, what="s1 owns every partition")
    producer.join(timeout=60)
    assert not producer.is_alive()
    wait_for(lambda: len(consumers.processed()) >= total, timeout=60, what="every event processed")
    seen = consumers.processed()
    per_partition = total // SPARK_PARTITIONS
    assert set(seen) == {(str(p), n) for p in range(SPARK_PARTITIONS) for n in range(per_partition)}
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert duplicates == {}, f"{len(duplicates)} events processed more than once"
    # s1 really took over s2's partitions after the move (and continued them).
    taken_over = {p for p, _ in consumers.processed_by("s1")} & moved
    assert taken_over == moved
    final = {str(p): per_partition - 1 for p in range(SPARK_PARTITIONS)}
    with contextlib.suppress(AssertionError):
        wait_for(lambda: watch.last == final, timeout=30, what="final checkpoints")
    assert watch.last == final
    assert watch.regressions == []
    # The example pipeline's Parquet sink (a directory per batch) counted every event once:
    # per partition, the batches' sequence ranges tile 0..last without a gap or an overlap.
    assert consumers.output is not None
    table = pq.read_table(consumers.output).to_pydict()
    assert sum(table["events"]) == total
    batches: dict[str, set[tuple[int, int]]] = collections.defaultdict(set)
    for partition, batch in zip(table["partition"], table["batch"], strict=True):
        first, last = str(batch).split("-")
        batches[str(partition)].add((int(first), int(last)))
    for partition in map(str, range(SPARK_PARTITIONS)):
        ranges = sorted(batches[partition])
        assert len(ranges) >= 2, f"partition {partition}: {ranges}"
        assert ranges[0][0] == 0, ranges
        assert ranges[-1][1] == per_partition - 1, ranges
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges)), ranges
