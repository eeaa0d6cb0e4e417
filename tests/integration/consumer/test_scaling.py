"""End to end on the local stack: the real operator, consumers as separate processes.

As in a cluster: the operator (kopf, in a thread) watches the EventHubConsumer and the pods
in the local Kubernetes API; each consumer pod is an ``ehb consume`` process that watches its
ConfigMap, receives from the Event Hubs emulator (a child process) and checkpoints into
Azurite. The test plays the kubelet: it mirrors each process's /readyz into its Pod's Ready
condition, marks pods terminating and sends SIGTERM (or SIGKILL).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
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
from eventhub_balancer.benchmarks import consuming
from eventhub_balancer.contracts import specs
from eventhub_balancer.local.kube import LocalKubeAPI
from tests.plugins.consumer import send_events
from tests.plugins.operator import CR, Stack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
NAMESPACE = "shop"
FQNS = "shop.servicebus.windows.net"
PARTITIONS = 16
BATCH_SIZE = 100


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
    ) -> None:
        self.stack = stack
        self.eventhubs = eventhubs
        self.blob = blob
        self.records = records
        self.kubeconfig = kubeconfig
        self.spark = spark
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
            "EHB_EVENTHUB_CONNECTION_STRING": self.eventhubs,
            "EHB_BLOB_CONNECTION_STRING": self.blob,
            "EHB_TEST_RECORD_DIR": str(self.records),
            "KUBECONFIG": str(self.kubeconfig),
        }
        command = [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "-v",
            "consume",
            "--handler",
            "recording:process",
            "--handler-path",
            str(HERE),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--batch-size",
            str(BATCH_SIZE),
            "--max-wait",
            "0.2",
            "--shutdown-timeout",
            "15",
        ]
        log = open(self.records / f"{pod}.stderr", "wb")  # noqa: SIM115 - closed with the process
        self.processes[pod] = subprocess.Popen(command, env=env, stdout=log, stderr=log)

    def _readyz(self, pod: str) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.ports[pod]}/readyz", timeout=1
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def _mirror_readiness(self) -> None:
        while not self._stop.wait(0.2):
            for pod in list(self.processes):
                process = self.processes.get(pod)
                if process is None or process.poll() is not None:
                    continue
                now = self._readyz(pod)
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
            for line in path.read_text().splitlines():
                partition, sequence = line.split()
                seen[(partition, int(sequence))] += 1
        return seen


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


@pytest.fixture
def local_stack(
    tmp_path: Path, azurite: Any
) -> Iterator[tuple[Stack, Consumers, CheckpointWatch, str]]:
    kube = LocalKubeAPI().start()
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    records = tmp_path / "records"
    records.mkdir()
    with consuming.emulator_process(partitions_=PARTITIONS) as eventhubs_cs:
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


def produce(cs: str, total: int, *, rounds: int) -> threading.Thread:
    """Send ``total`` events spread evenly over the partitions in ``rounds`` bursts."""
    per_round = total // PARTITIONS // rounds
    assert per_round * PARTITIONS * rounds == total, "choose rounds that divide the total"

    def main() -> None:
        for _ in range(rounds):
            asyncio.run(
                send_events(cs, consuming.HUB, {str(p): per_round for p in range(PARTITIONS)})
            )
            time.sleep(1.0)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread


def owned_counts(stack: Stack) -> list[int]:
    return sorted(n for n in stack.counts(NAMESPACE).values() if n)


def test_scale_2_4_1_processes_every_event_once(
    local_stack: tuple[Stack, Consumers, CheckpointWatch, str],
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


def test_a_killed_consumer_duplicates_at_most_its_unfinished_batches(
    local_stack: tuple[Stack, Consumers, CheckpointWatch, str],
) -> None:
    stack, consumers, watch, cs = local_stack
    total = 16_000
    producer = produce(cs, total, rounds=8)
    for pod in ("k1", "k2"):
        consumers.start(pod)
    wait_for(lambda: owned_counts(stack) == [8, 8], timeout=60, what="2 pods with 8 partitions")
    wait_for(lambda: len(consumers.processed()) > 6_000, timeout=90, what="progress")
    victim = stack.assignment(NAMESPACE)["k2"]
    consumers.kill("k2")
    wait_for(lambda: owned_counts(stack) == [16], timeout=60, what="k1 owns every partition")
    producer.join(timeout=120)
    wait_for(lambda: len(consumers.processed()) >= total, timeout=120, what="every event processed")
    seen = consumers.processed()
    per_partition = total // PARTITIONS
    assert set(seen) == {(str(p), n) for p in range(PARTITIONS) for n in range(per_partition)}
    duplicated = collections.Counter(p for (p, _), n in seen.items() if n > 1)
    # Only the killed pod's partitions, and per partition at most the batch in its handler and
    # the one whose checkpoint write was in flight (the runtime overlaps the two).
    assert set(duplicated) <= set(victim)
    wait_for(lambda: len(watch.last) == PARTITIONS, timeout=30, what="checkpoints observed")
    assert all(n <= 2 * BATCH_SIZE for n in duplicated.values()), duplicated
    assert watch.regressions == []
