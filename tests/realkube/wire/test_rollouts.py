"""A rolling update of a consumer Deployment on the real control plane, measured as its user
meets it.

The consumer chart is installed with 4 pods over a hub of 16 partitions, events flow to every
partition, and the pod template changes: the real kube-controller-manager rolls the
Deployment with the chart's own strategy (``maxSurge: 1``, ``maxUnavailable: 0``, or
``EHB_ROLLOUT_SURGE``), the local node runs each pod as a process. ``kubectl rollout status`` must
finish, no event may be processed twice or lost, and each partition must move once, from an old
pod to a new one: before the operator knew which pods a rollout replaces, 3 or 4 of the 16
partitions moved twice or more (20 owner changes), some onto an old pod that was replaced next
(docs/planner.md, "A rolling update"). Run with ``-s`` for the figures: the owner changes, and
how long partitions waited for their next owner beyond the usual interval between batches.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from eventhub_balancer_devstack import deployments, recording
from eventhub_balancer_devstack.realkube import RealControlPlane, nodes
from tests.install import test_consumer_chart as consumer_chart
from tests.install.wire.test_example_release import example_values
from tests.realkube.wire.test_example_release import OPERATOR_VALUES, image_of
from tests.support import charts, loading
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = consumer_chart.NAMESPACE
HUB = "big"
PARTITIONS = [str(i) for i in range(16)]
REPLICAS = int(os.environ.get("EHB_ROLLOUT_REPLICAS", "4"))
#: "" = the chart's own strategy; else a count ("2") or a percentage ("25%")
SURGE = os.environ.get("EHB_ROLLOUT_SURGE", "")
RATE_S = 0.25  # one event per partition every RATE_S


def _producer(connection: str, stop: threading.Event, sent: dict[str, int]) -> None:
    from azure.eventhub import EventData
    from azure.eventhub.aio import EventHubProducerClient

    async def run() -> None:
        producer = EventHubProducerClient.from_connection_string(connection, eventhub_name=HUB)
        async with producer:
            while not stop.is_set():
                began = time.monotonic()
                for p in PARTITIONS:
                    batch = await producer.create_batch(partition_id=p)
                    batch.add(EventData(f"{p}:{sent[p]}".encode()))
                    await producer.send_batch(batch)
                    sent[p] += 1
                await asyncio.sleep(max(0.0, RATE_S - (time.monotonic() - began)))

    asyncio.run(run())


def _records(directory: Path) -> list[tuple[float, str, str, int, list[int]]]:
    out = []
    for f in directory.glob("*" + recording.SUFFIX):
        for line in f.read_text().splitlines():
            at, pod, partition, epoch, spans = line.split(" ")
            numbers = []
            for span in spans.split(","):
                a, b = span.split("-")
                numbers += range(int(a), int(b) + 1)
            out.append((float(at), pod, partition, int(epoch), numbers))
    out.sort()
    return out


def all_processed(directory: Path, sent: Mapping[str, int]) -> bool:
    """Whether every event ``sent`` to each partition is among those recorded."""
    done: dict[str, set[int]] = collections.defaultdict(set)
    for r in _records(directory):
        done[r[2]].update(r[4])
    return all(len(done[p]) >= sent[p] for p in PARTITIONS)


def twice_and_lost(
    recs: list[tuple[float, str, str, int, list[int]]], sent: Mapping[str, int]
) -> tuple[int, int]:
    """How many recorded events were processed more than once, and how many sent never were."""
    seen: collections.Counter[tuple[str, int]] = collections.Counter()
    for r in recs:
        for n in r[4]:
            seen[(r[2], n)] += 1
    twice = sum(c - 1 for c in seen.values() if c > 1)
    lost = sum(sent[p] - len({n for (q, n) in seen if q == p}) for p in PARTITIONS)
    return twice, lost


def install_release(
    *,
    kubectl: Kubectl,
    kubeconfig: Path,
    local_node_factory: Callable[[Mapping[str, deployments.LocalImage]], nodes.LocalNode],
    home: Path,
    eventhub: str,
    blob: str,
    container: str,
    records: Path,
    replicas: int,
) -> None:
    """The operator's chart, then the example consumer's (``replicas`` pods recording each
    batch into ``records``, on hub `HUB` of the emulator ``eventhub`` and the blob container
    ``container``), as a user installs them; the local node runs both images here."""
    values = example_values()
    values["consumer"]["checkpointStore"]["containerName"] = container
    values["consumer"]["eventHub"]["name"] = HUB
    values["handler"] = f"{recording.__name__}:process"
    values["replicaCount"] = replicas
    values["extraEnv"] = [
        {"name": "EHB_ALLOW_DEVELOPMENT_ENDPOINTS", "value": "true"},
        {"name": recording.ENV_RECORD_DIR, "value": str(records)},
    ]
    values["logFormat"] = "text"
    consumer = consumer_chart.render(values)["EventHubConsumer"][0]
    store = consumer["spec"]["checkpointStore"]
    operator_image = image_of(
        charts.render(
            loading.CHART_DIR, OPERATOR_VALUES, name=loading.RELEASE,
            namespace=loading.RELEASE_NAMESPACE,
        )
    )  # fmt: skip
    consumer_image = image_of(
        charts.render(consumer_chart.CHART_DIR, values, name="orders", namespace=NAMESPACE)
    )
    runtime = (sys.executable, "-m", "eventhub_balancer")
    local_node_factory(
        {
            operator_image: deployments.LocalImage(entrypoint=runtime),
            consumer_image: deployments.LocalImage(entrypoint=runtime),
        }
    )
    env = {"KUBECONFIG": str(kubeconfig), "HOME": str(home)}
    kubectl("create", "namespace", NAMESPACE)
    charts.helm(
        "install", loading.RELEASE, str(loading.CHART_DIR),
        "--namespace", loading.RELEASE_NAMESPACE, "--create-namespace", "--wait=false",
        values=OPERATOR_VALUES, env=env,
    )  # fmt: skip
    eventhub_ref = consumer["spec"]["eventHub"]["credentials"]["connectionStringSecretRef"]
    blob_ref = store["credentials"]["connectionStringSecretRef"]
    for ref, value in ((eventhub_ref, eventhub), (blob_ref, blob)):
        kubectl("-n", NAMESPACE, "create", "secret", "generic", ref["name"],
                f"--from-literal={ref['key']}={value}")  # fmt: skip
    charts.helm(
        "install", "orders", str(consumer_chart.CHART_DIR), "--namespace", NAMESPACE,
        values=values, env=env,
    )  # fmt: skip


def test_a_rolling_update_moves_each_partition_once_without_duplicates(
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    real_kube: RealControlPlane,
    real_kubeconfig: Path,
    real_kubectl: Kubectl,
    local_node_factory: Callable[[Mapping[str, deployments.LocalImage]], nodes.LocalNode],
    tmp_path: Path,
) -> None:
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    install_release(
        kubectl=real_kubectl,
        kubeconfig=real_kubeconfig,
        local_node_factory=local_node_factory,
        home=tmp_path,
        eventhub=consumer_emulator.connection_string(),
        blob=azurite.connection_string,
        container=blob_container.container_name,
        records=records_dir,
        replicas=REPLICAS,
    )
    deployment = "deployment/orders-eventhub-consumer"
    if SURGE:
        surge: int | str = int(SURGE) if SURGE.isdecimal() else SURGE
        strategy = {"rollingUpdate": {"maxSurge": surge, "maxUnavailable": 0}}
        real_kubectl("-n", NAMESPACE, "patch", deployment, "--type=merge", "-p",
                     json.dumps({"spec": {"strategy": strategy}}))  # fmt: skip
    stop = threading.Event()
    sent: dict[str, int] = collections.Counter()
    producer = threading.Thread(
        target=_producer, args=(consumer_emulator.connection_string(), stop, sent), daemon=True
    )
    producer.start()
    # steady: every partition processed recently by REPLICAS pods
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        recs = [r for r in _records(records_dir) if r[0] > time.time() - 3]
        if len({r[2] for r in recs}) == 16 and len({r[1] for r in recs}) == REPLICAS:
            break
        time.sleep(1)
    else:
        raise AssertionError("never steady")
    time.sleep(5)
    began = time.time()
    real_kubectl("-n", NAMESPACE, "patch", deployment, "--type=merge", "-p", json.dumps(
        {"spec": {"template": {"metadata": {"annotations": {"rollout": "1"}}}}}
    ))  # fmt: skip
    status = subprocess.run(
        [
            "kubectl", "--kubeconfig", str(real_kubeconfig), "-n", NAMESPACE, "rollout",
            "status", deployment, "--timeout=240s",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    rolled = time.time()
    time.sleep(15)
    stop.set()
    producer.join(30)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all_processed(records_dir, sent):
        time.sleep(1)
    recs = _records(records_dir)
    old_pods = {r[1] for r in recs if r[0] < began}
    duplicates, lost = twice_and_lost(recs, sent)
    # The usual interval between a partition's batches, before the rollout: a move costs what
    # its gap exceeds it by.
    usual = statistics.median(
        b[0] - a[0]
        for p in PARTITIONS
        for a, b in itertools.pairwise(r for r in recs if r[2] == p and r[0] < began)
    )
    moves: dict[str, list[tuple[str, int]]] = {}
    waits: list[float] = []
    for p in PARTITIONS:
        mine = [r for r in recs if r[2] == p and r[0] >= began - 1]
        owners: list[tuple[str, int]] = []
        for r in mine:
            if not owners or owners[-1][1] != r[3]:
                if owners:
                    last = max(x[0] for x in mine if x[3] == owners[-1][1])
                    waits.append(max(0.0, r[0] - last - usual))
                owners.append((r[1], r[3]))
        moves[p] = owners
        print(p, " -> ".join(f"{pod[-5:]}@{epoch}" for pod, epoch in owners))
    changes = sum(len(o) - 1 for o in moves.values())
    print(
        f"rollout of {REPLICAS} pods (maxSurge {SURGE or 1}): rollout status {status.returncode}"
        f" in {rolled - began:.1f} s; {changes} owner changes over {len(PARTITIONS)} partitions,"
        f" {sum(len(o) > 2 for o in moves.values())} moved twice or more; {duplicates} events"
        f" processed twice, {lost} lost; partitions waited {sum(waits):.1f} s in all beyond the"
        f" usual {usual:.2f} s between batches (at most {max(waits, default=0):.2f} s)"
    )
    assert status.returncode == 0, status.stderr
    assert duplicates == 0
    assert lost == 0
    twice = {p: o for p, o in moves.items() if len(o) != 2}
    assert not twice, f"partitions that did not move exactly once: {twice}"
    onto_old = {p: o for p, o in moves.items() if o[-1][0] in old_pods}
    assert not onto_old, f"partitions left on a pod the rollout replaced: {onto_old}"
