"""An autoscaler (HPA or KEDA) scaling a consumer Deployment on the real control plane,
measured as its user meets it.

One consumer release runs for the whole module over a hub of 16 partitions on the Event Hubs
emulator, with events flowing to every partition; each test brings it to a steady size, then
scales it as an autoscaler does (``kubectl scale``, in one step) or rolls it with Kubernetes'
default strategy (``maxSurge: 25%``, ``maxUnavailable: 25%``, what a Deployment written by hand
gets). The real kube-controller-manager picks the pods to add and delete, the local node runs
each pod as a process. Each test counts the owner changes against the fewest that reach
balance from where the change began, the events processed twice or lost, and the longest time
a partition went unserved beyond the usual interval between its batches. Run with ``-s`` for
the figures (docs/planner.md, "Scaling"), with ``EHB_BENCH_TESTS=1`` for the two scenarios
measured but not held to the fewest moves.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import blobs
from eventhub_balancer_devstack import deployments
from eventhub_balancer_devstack.realkube import RealControlPlane, nodes
from tests.install import test_consumer_chart as consumer_chart
from tests.realkube.wire.test_rollouts import (
    HUB,
    PARTITIONS,
    _producer,
    _records,
    install_release,
)
from tests.support.fixtures.azurite import unique_container_name
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = consumer_chart.NAMESPACE
DEPLOYMENT = "deployment/orders-eventhub-consumer"
Record = tuple[float, str, str, int, list[int]]


@dataclasses.dataclass(kw_only=True)
class Release:
    kubectl: Kubectl
    kubeconfig: Path
    records: Path
    sent: dict[str, int]

    def scale(self, replicas: int) -> None:
        self.kubectl("-n", NAMESPACE, "scale", DEPLOYMENT, f"--replicas={replicas}")

    def rollout_status(self, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "kubectl", "--kubeconfig", str(self.kubeconfig), "-n", NAMESPACE, "rollout",
                "status", DEPLOYMENT, f"--timeout={int(timeout)}s",
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    def owners(self, within: float = 2.5) -> dict[str, str]:
        """Each partition's last owner among the batches of the last ``within`` seconds."""
        latest: dict[str, tuple[float, str]] = {}
        for at, pod, partition, _, _ in _records(self.records):
            if at > time.time() - within:
                latest[partition] = max(latest.get(partition, (at, pod)), (at, pod))
        return {p: pod for p, (_, pod) in latest.items()}

    def wait_balanced(self, replicas: int, *, timeout: float = 60) -> None:
        """Until every partition is served, by ``replicas`` pods holding 16/replicas each."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            owners = self.owners()
            counts = collections.Counter(owners.values())
            if (
                len(owners) == len(PARTITIONS)
                and len(counts) == replicas
                and max(counts.values()) - min(counts.values()) <= 1
            ):
                return
            time.sleep(0.5)
        raise AssertionError(f"not balanced over {replicas} pods: {self.owners()}")


@pytest.fixture(scope="module")
def release(
    real_kube: RealControlPlane,
    real_kubeconfig: Path,
    real_kubectl: Kubectl,
    local_node_factory: Callable[[Mapping[str, deployments.LocalImage]], nodes.LocalNode],
    azurite: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Release]:
    from eventhub_balancer_devstack.eventhubs import EventHubsEmulator

    tmp_path = tmp_path_factory.mktemp("scaling")
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    container = unique_container_name()

    async def make_container() -> None:
        async with blobs.open_container(
            container_name=container, connection_string=azurite.connection_string
        ) as client:
            await blobs.ensure_container(client)

    asyncio.run(make_container())
    emulator = EventHubsEmulator(hubs={HUB: len(PARTITIONS)})
    with emulator.running_in_thread():
        install_release(
            kubectl=real_kubectl,
            kubeconfig=real_kubeconfig,
            local_node_factory=local_node_factory,
            home=tmp_path,
            eventhub=emulator.connection_string(),
            blob=azurite.connection_string,
            container=container,
            records=records_dir,
            replicas=4,
        )
        stop = threading.Event()
        sent: dict[str, int] = collections.Counter()
        producer = threading.Thread(
            target=_producer, args=(emulator.connection_string(), stop, sent), daemon=True
        )
        producer.start()
        try:
            yield Release(
                kubectl=real_kubectl, kubeconfig=real_kubeconfig, records=records_dir, sent=sent
            )
        finally:
            stop.set()
            producer.join(30)


@dataclasses.dataclass(kw_only=True)
class Figures:
    changes: int
    fewest: int
    twice: dict[str, list[tuple[str, int]]]
    duplicates: int
    lost: int
    longest_wait: float
    usual: float

    def line(self, name: str) -> str:
        return (
            f"{name}: {self.changes} owner changes where {self.fewest} reach balance,"
            f" {len(self.twice)} partitions moved twice or more; {self.duplicates} events"
            f" processed twice, {self.lost} lost; longest wait {self.longest_wait:.2f} s beyond"
            f" the usual {self.usual:.2f} s between batches"
        )


def fewest(before: Mapping[str, str], after: Sequence[str]) -> int:
    """The fewest owner changes from ``before`` (partition -> pod) to a balance over ``after``:
    every partition of a pod not in ``after`` moves, and each staying pod keeps at most its
    target, the larger targets going to the pods that hold the most."""
    base, extra = divmod(len(PARTITIONS), len(after))
    held = collections.Counter(pod for pod in before.values() if pod in after)
    ranked = sorted((held[pod] for pod in after), reverse=True)
    kept = sum(min(h, base + (1 if i < extra else 0)) for i, h in enumerate(ranked))
    return len(PARTITIONS) - kept


def measure(release: Release, *, began: float, before: Mapping[str, str]) -> Figures:
    """Figures of the window since ``began``, once every event sent so far is processed."""
    after = sorted(set(release.owners().values()))
    sent = dict(release.sent)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        recs = _records(release.records)
        done: dict[str, set[int]] = collections.defaultdict(set)
        for r in recs:
            done[r[2]].update(r[4])
        if all(done[p].issuperset(range(sent[p])) for p in PARTITIONS):
            break
        time.sleep(0.5)
    seen: collections.Counter[tuple[str, int]] = collections.Counter()
    for r in recs:
        for n in r[4]:
            seen[(r[2], n)] += 1
    duplicates = sum(c - 1 for c in seen.values() if c > 1)
    lost = sum(len(set(range(sent[p])) - done[p]) for p in PARTITIONS)
    usual = statistics.median(
        b[0] - a[0]
        for p in PARTITIONS
        for a, b in itertools.pairwise(r for r in recs if r[2] == p and began - 10 < r[0] < began)
    )
    moves: dict[str, list[tuple[str, int]]] = {}
    longest, where = 0.0, ""
    for p in PARTITIONS:
        mine = [r for r in recs if r[2] == p and r[0] >= began - 1]
        for a, b in itertools.pairwise(mine):
            if b[0] - a[0] - usual > longest:
                longest = b[0] - a[0] - usual
                where = f"partition {p} {a[1][-5:]}@{a[3]} -> {b[1][-5:]}@{b[3]}"
        owners: list[tuple[str, int]] = []
        for r in mine:
            if not owners or owners[-1][1] != r[3]:
                owners.append((r[1], r[3]))
        moves[p] = owners
        print(p, " -> ".join(f"{pod[-5:]}@{epoch}" for pod, epoch in owners))
    print("longest wait:", where)
    return Figures(
        changes=sum(len(o) - 1 for o in moves.values()),
        fewest=fewest(before, after),
        twice={p: o for p, o in moves.items() if len(o) > 2},
        duplicates=duplicates,
        lost=lost,
        longest_wait=longest,
        usual=usual,
    )


def steady(release: Release, replicas: int) -> tuple[float, dict[str, str]]:
    release.scale(replicas)
    assert release.rollout_status().returncode == 0
    release.wait_balanced(replicas)
    time.sleep(5)
    return time.time(), release.owners()


def settle(release: Release, replicas: int) -> None:
    status = release.rollout_status()
    assert status.returncode == 0, status.stderr
    release.wait_balanced(replicas)
    time.sleep(3)


def check(figures: Figures, name: str, *, minimal: bool) -> None:
    """No event twice, none lost; with ``minimal``, no owner change beyond the fewest."""
    print(figures.line(name))
    assert figures.duplicates == 0
    assert figures.lost == 0
    if minimal:
        assert figures.changes <= figures.fewest, figures.twice


def test_a_scale_in_from_8_to_2_moves_only_the_deleted_pods_partitions(
    release: Release,
) -> None:
    began, before = steady(release, 8)
    release.scale(2)
    settle(release, 2)
    check(measure(release, began=began, before=before), "scale-in 8 -> 2", minimal=True)


def test_a_scale_out_from_2_to_8_moves_each_partition_once(release: Release) -> None:
    began, before = steady(release, 2)
    release.scale(8)
    settle(release, 8)
    # Each partition moves once (docs/planner.md, "A burst of joins"): the new pods count as
    # starting once they are bound to a node. When the local node bound a pod only after it
    # had started the one before, 1 to 3 of 16 partitions moved twice.
    check(measure(release, began=began, before=before), "scale-out 2 -> 8", minimal=True)


def test_a_flapping_autoscaler_costs_no_more_than_each_change_needs(release: Release) -> None:
    began, before = steady(release, 4)
    steps = []
    for replicas in (6, 4, 6):
        release.scale(replicas)
        # Each change settles before the next: a snapshot taken after a fixed time (12 s) was
        # taken mid-way on a loaded machine, and the fewest counted from it was too low.
        settle(release, replicas)
        steps.append(release.owners())
    figures = measure(release, began=began, before=before)
    # Each change's fewest, from where it began to the pods it ended with: the partitions do
    # go back and forth, since the autoscaler deletes the pods it added.
    path = [before, *steps[:-1], release.owners()]
    figures.fewest = sum(fewest(a, sorted(set(b.values()))) for a, b in itertools.pairwise(path))
    check(figures, "flapping 4 -> 6 -> 4 -> 6", minimal=True)


#: The scenarios whose owner changes are measured, not asserted (each still asserts no event
#: processed twice and none lost): they run when ``EHB_BENCH_TESTS=1``, as the benchmarks'
#: tests do, and keep the suite's time for the ones that assert the fewest moves.
measured_only = pytest.mark.skipif(
    os.environ.get("EHB_BENCH_TESTS") != "1", reason="opt-in: set EHB_BENCH_TESTS=1"
)


@measured_only
def test_a_scale_in_during_a_hand_off(release: Release) -> None:
    began, before = steady(release, 4)
    release.scale(8)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and set(release.owners(1).values()) <= set(before.values()):
        time.sleep(0.2)
    release.scale(2)
    settle(release, 2)
    # A hand-off under way is never cancelled: what moved onto a pod deleted next moves again,
    # so the fewest from the start is not reachable; the figures are printed.
    check(
        measure(release, began=began, before=before),
        "scale-in 4 -> 8 -> 2 mid-hand-off",
        minimal=False,
    )


@measured_only
def test_a_rolling_update_with_the_default_strategy(release: Release) -> None:
    began, before = steady(release, 4)
    strategy = {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    release.kubectl("-n", NAMESPACE, "patch", DEPLOYMENT, "--type=merge", "-p",
                    json.dumps({"spec": {"strategy": strategy}}))  # fmt: skip
    began, before = time.time(), release.owners()
    release.kubectl("-n", NAMESPACE, "patch", DEPLOYMENT, "--type=merge", "-p", json.dumps(
        {"spec": {"template": {"metadata": {"annotations": {"rollout": "1"}}}}}
    ))  # fmt: skip
    settle(release, 4)
    # The old pod deleted first, before any new pod is Ready, spreads its partitions over the
    # old pods replaced next (docs/planner.md, "Scaling"): the figures are printed.
    check(
        measure(release, began=began, before=before),
        "rolling update 25%/25% of 4 pods",
        minimal=False,
    )
