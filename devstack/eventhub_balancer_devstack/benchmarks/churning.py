"""The operator under churn for minutes: does what it holds stay flat?

An operator runs for months while Deployments roll: every pod it sees has a name and a uid
that never come back, ConfigMaps are written, deleted and tampered with, EventHubConsumers
come and go. Anything it keeps per pod, per ConfigMap or per consumer and never lets go of
grows until its memory limit. ``ehb bench operator`` runs a few rounds and cannot tell.

This soak runs the operator as ``ehb bench operator`` does (the local Kubernetes API, the Event
Hubs emulator and Azurite, the operator and the consumer doubles as processes of their own,
`processes`) on one EventHubConsumer of ``partitions`` x ``pods`` and churns its fleet round
after round for ``seconds``: a pod with a new name joins; the oldest leaves, drained (a
graceful delete) in one round and deleted outright in the next; every `CONFIGMAP_EVERY`
rounds a pod's ConfigMap is deleted under it or overwritten, and the operator writes it
again; every `CONSUMER_EVERY` rounds an EventHubConsumer with pods of its own is created,
balanced and deleted. Every few seconds it samples the operator's process (`soaking.usage`):
resident memory, threads, open descriptors. Growth is the least-squares slope over the second
half (`soaking.second_half_slopes`), as for the consumer soak.

With ``tracemalloc`` the operator traces its allocations (``FRAMES`` frames) from the initial
balance on, and dumps a snapshot at a fifth of the run and at its end; the report lists what
grew most between the two, by traceback. Tracing slows the operator and adds to its memory:
its slopes are not the figures, only where to look.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypedDict

import kubernetes.client

from eventhub_balancer import errors
from eventhub_balancer.adapters import eventhubs, kubeapi
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers import registering, running
from eventhub_balancer_devstack import azurite, clusters
from eventhub_balancer_devstack.benchmarks import operating, processes, soaking, watching

logger = logging.getLogger(__name__)

NAMESPACE = "soak"
#: The churned EventHubConsumer (and its hub), and its pods' ``app`` label.
CONSUMER = "soak"
APP = "soak"
#: The EventHubConsumers created and deleted: each in turn reads this hub, with pods of its own.
PASSING_HUB = "soak-passing"
PASSING_APP = "soak-passing"
PASSING_PARTITIONS = 4
PASSING_PODS = 2
#: spec.balancing.intervalSeconds, as ``ehb bench operator`` runs it: more cycles per minute.
INTERVAL_SECONDS = 2
#: The project's target (docs/benchmarks.md): MB of resident memory per minute, second half.
TARGET_RSS_MB_PER_MIN = soaking.TARGET_RSS_MB_PER_MIN
#: A ConfigMap is deleted or overwritten every so many rounds, a consumer created and deleted.
CONFIGMAP_EVERY = 2
CONSUMER_EVERY = 5
#: The longest wait for one step of a round (the operator balances within seconds).
STEP_SECONDS = clusters.WAIT_SECONDS
#: How often the harness looks at what its watch delivered: it shares the 2 cores with the
#: operator, so it does not spin.
POLL_SECONDS = 0.05
#: With tracemalloc: frames kept per allocation, and the growths reported.
FRAMES = 8
TOP_GROWTHS = 12
#: The file the operator writes once it traces its allocations.
TRACING = "tracing"
#: The longest wait for the operator to dump a snapshot (a traced heap of tens of MB).
SNAPSHOT_SECONDS = 120.0
#: The early snapshot, as a fraction of the run (the issue's "minute 2 of 10").
EARLY_SNAPSHOT = 0.2


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    seconds: float = 600.0
    partitions: int = 32
    pods: int = 8
    #: Seconds between two samples of the operator's process.
    sample_seconds: float = 5.0
    tracemalloc: bool = False

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.sample_seconds <= 0:
            raise errors.InvalidInput("soak", "--seconds and the sampling must be > 0")
        if self.pods < 2:
            raise errors.InvalidInput("--pods", "must be at least 2 (the oldest leaves)")
        if self.partitions <= self.pods:
            raise errors.InvalidInput("--partitions", "must be more than --pods")


class Churned(TypedDict):
    """What the soak did to the operator's world."""

    rounds: int
    joined: int
    drained: int
    deleted: int
    configmaps_deleted: int
    configmaps_overwritten: int
    consumers_created: int
    consumers_deleted: int


class Growth(TypedDict):
    """One allocation site's growth between the two snapshots (tracemalloc)."""

    kb: float
    count: int
    #: the traceback, most recent call first, as ``file:line``
    traceback: list[str]


class Report(TypedDict):
    mode: str
    seconds: float
    partitions: int
    pods: int
    interval_seconds: int
    sample_seconds: float
    churned: Churned
    rss_mb_start: float
    rss_mb_mid: float
    rss_mb_end: float
    slopes: soaking.Slopes
    target_rss_mb_per_min: float
    #: The slope within the target, and flat threads and descriptors.
    ok: bool
    #: With tracemalloc: its slopes are not the figures (the tracing costs memory).
    traced: bool
    growths: list[Growth]
    samples: soaking.Series


# -- the operator process (its own, so that tracemalloc can be switched on in it)


class OperatorChild(processes.Child):
    """The real operator (`serve_operator`) in a process of its own, which can trace its
    allocations: the first SIGUSR1 starts tracing, each
    later one dumps a snapshot. Tracing starts once the operator runs: the Kubernetes client
    imports its API classes lazily, and under tracing that import alone takes minutes."""

    def __init__(self, kubeconfig: Path, namespace: str, *, snapshots: Path | None) -> None:
        self.role = "operator"
        traced = ["--snapshots", str(snapshots)] if snapshots is not None else []
        command = [sys.executable, "-m", __name__, "--kubeconfig", str(kubeconfig)]
        self.process = subprocess.Popen(
            [*command, "--namespace", namespace, *traced],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.snapshots = snapshots
        self.ready = self._line(processes.START_SECONDS)
        self._taken = itertools.count()

    def trace(self) -> None:
        """Start tracing allocations (before the first snapshot)."""
        assert self.snapshots is not None
        self._signal(self.snapshots / TRACING)

    def snapshot(self) -> Path:
        """Ask for a snapshot; its file once written."""
        assert self.snapshots is not None
        path = self.snapshots / f"{next(self._taken)}.snapshot"
        self._signal(path)
        return path

    def _signal(self, written: Path) -> None:
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + SNAPSHOT_SECONDS
        while not written.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise TimeoutError(f"the operator wrote no {written.name} in {SNAPSHOT_SECONDS} s")
            time.sleep(0.2)


def _trace_on_signal(directory: Path) -> None:
    """In the operator's process: the first SIGUSR1 starts tracing (and writes `TRACING`),
    each later one dumps a snapshot as ``N.snapshot``, renamed into place once whole."""
    taken = itertools.count()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(FRAMES)
            (directory / TRACING).touch()
            return
        path = directory / f"{next(taken)}.snapshot"
        partial = path.with_suffix(".partial")
        tracemalloc.take_snapshot().dump(str(partial))
        partial.rename(path)

    signal.signal(signal.SIGUSR1, on_signal)


def growths(early: Path, late: Path, *, top: int = TOP_GROWTHS) -> list[Growth]:
    """What grew most between two snapshots, by traceback (tracemalloc's own frames and the
    import machinery left out)."""
    ignored = (
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
        tracemalloc.Filter(False, "<unknown>"),
    )
    before = tracemalloc.Snapshot.load(str(early)).filter_traces(ignored)
    after = tracemalloc.Snapshot.load(str(late)).filter_traces(ignored)
    found: list[Growth] = []
    for stat in after.compare_to(before, "traceback")[:top]:
        found.append(
            {
                "kb": round(stat.size_diff / 1024, 1),
                "count": stat.count_diff,
                "traceback": [_where(f.filename, f.lineno) for f in reversed(stat.traceback)],
            }
        )
    return found


def _where(filename: str, lineno: int) -> str:
    """A frame's file as from its package (site-packages/, the repository's folders)."""
    for marker in ("site-packages/", "/operator/", "/devstack/", "/lib/python3"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    return f"{filename}:{lineno}"


# -- the stack and the world around the operator


@contextlib.contextmanager
def _stack(settings: Settings) -> Iterator[tuple[Path, str, str, processes.Child]]:
    """The API server process, the emulator process (``ehb local eventhubs``, the churned
    consumer's hub and the passing consumers' hub) and Azurite: the kubeconfig and the two
    connection strings; all stopped on exit."""
    hubs = [f"{CONSUMER}={settings.partitions}", f"{PASSING_HUB}={PASSING_PARTITIONS}"]
    with tempfile.TemporaryDirectory(prefix="ehb-soak-operator-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        server = processes.Child("apiserver", "--kubeconfig", str(kubeconfig))
        emulator = subprocess.Popen(
            [str(Path(sys.executable).with_name("ehb")), "local", "eventhubs", "--port", "0"]
            + [f"--hub={hub}" for hub in hubs],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert emulator.stdout is not None
            with azurite.Azurite() as blob_store:
                asyncio.run(operating.create_container(blob_store.connection_string))
                yield (
                    kubeconfig,
                    emulator.stdout.readline().strip(),
                    blob_store.connection_string,
                    server,
                )
        finally:
            emulator.terminate()
            try:
                emulator.wait(processes.STOP_SECONDS)
            except subprocess.TimeoutExpired:
                emulator.kill()
                emulator.wait(processes.STOP_SECONDS)
            server.stop()


def consumer_body(name: str, *, hub: str, app: str) -> dict[str, Any]:
    return operating.consumer_body(
        name, hub=hub, app=app, interval=INTERVAL_SECONDS, host="soak.servicebus.windows.net"
    )


def _wait(predicate: Callable[[], Any], what: str) -> None:
    clusters.wait_for(predicate, timeout=STEP_SECONDS, what=what, poll=POLL_SECONDS)


class World:
    """The cluster around the operator, as the soak churns it."""

    def __init__(self, api: kubernetes.client.ApiClient, settings: Settings) -> None:
        self.cluster = operating.Cluster(api, NAMESPACE)
        self.view = operating.View()
        self.partitions = settings.partitions
        self.members: list[str] = []
        self._serial = itertools.count()
        self.churned: Churned = {
            "rounds": 0,
            "joined": 0,
            "drained": 0,
            "deleted": 0,
            "configmaps_deleted": 0,
            "configmaps_overwritten": 0,
            "consumers_created": 0,
            "consumers_deleted": 0,
        }

    def pod_name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._serial)}"

    def balanced(self) -> bool:
        return self.view.balanced_over(CONSUMER, set(self.members), self.partitions)

    def start(self, pods: int) -> None:
        self.cluster.custom.create_namespaced_custom_object(
            specs.GROUP,
            specs.VERSION,
            NAMESPACE,
            specs.PLURAL,
            consumer_body(CONSUMER, hub=CONSUMER, app=APP),
            _preload_content=False,
        )
        for _ in range(pods):
            name = self.pod_name(APP)
            self.cluster.pod(name, app=APP)
            self.members.append(name)
        _wait(self.balanced, "the initial balance")

    def round(self) -> None:
        """A pod joins; the oldest leaves (drained or deleted outright); now and then a
        ConfigMap is deleted or overwritten, and a consumer comes and goes."""
        n = self.churned["rounds"]
        joiner = self.pod_name(APP)
        self.cluster.pod(joiner, app=APP)
        self.members.append(joiner)
        self.churned["joined"] += 1
        _wait(self.balanced, f"{joiner} joined")

        leaving = self.members.pop(0)
        if n % 2 == 0:
            self.cluster.terminate(leaving)
            _wait(self.balanced, f"{leaving} drained")
            self.cluster.delete_pod(leaving)
            self.churned["drained"] += 1
        else:
            self.cluster.delete_pod(leaving)
            _wait(self.balanced, f"{leaving}'s partitions reassigned")
            self.churned["deleted"] += 1
        _wait(lambda: leaving not in self.view.pods(CONSUMER), f"{leaving}'s ConfigMap gone")

        if n % CONFIGMAP_EVERY == 0:
            self._rewrite(self.members[-1], delete=n % (2 * CONFIGMAP_EVERY) == 0)
        if n % CONSUMER_EVERY == 0:
            self._passing_consumer(n)
        self.churned["rounds"] += 1

    def _rewrite(self, pod: str, *, delete: bool) -> None:
        """The pod's ConfigMap deleted (a user's mistake) or overwritten with nothing assigned
        (tampering): the operator writes it again."""
        name = configmaps.configmap_name(consumer=CONSUMER, pod=pod)
        core = self.cluster.core
        if delete:
            old: Any = core.read_namespaced_config_map(name, NAMESPACE)
            core.delete_namespaced_config_map(name, NAMESPACE, _preload_content=False)

            def recreated() -> bool:
                try:
                    body: Any = core.read_namespaced_config_map(name, NAMESPACE)
                except kubernetes.client.ApiException as e:
                    if e.status == 404:
                        return False
                    raise
                return bool(body.metadata.uid != old.metadata.uid)

            # The watch may deliver the deletion and the new one together: ask the API.
            _wait(recreated, f"{name} deleted and written anew")
            self.churned["configmaps_deleted"] += 1
        else:
            patch = {"data": {configmaps.KEY_PARTITIONS: "{}"}}
            core.patch_namespaced_config_map(name, NAMESPACE, patch, _preload_content=False)

            def repaired() -> bool:
                body: Any = core.read_namespaced_config_map(name, NAMESPACE)
                return (body.data or {}).get(configmaps.KEY_PARTITIONS) != "{}"

            # The watch may deliver the overwrite and the repair together: ask the API.
            _wait(repaired, f"{name} overwritten and repaired")
            self.churned["configmaps_overwritten"] += 1
        _wait(self.balanced, f"{name} written again")

    def _passing_consumer(self, n: int) -> None:
        """An EventHubConsumer with pods of its own, balanced, then deleted with its pods."""
        name = f"passing-{n}"
        pods = {self.pod_name(PASSING_APP) for _ in range(PASSING_PODS)}
        custom = self.cluster.custom
        custom.create_namespaced_custom_object(
            specs.GROUP,
            specs.VERSION,
            NAMESPACE,
            specs.PLURAL,
            consumer_body(name, hub=PASSING_HUB, app=PASSING_APP),
            _preload_content=False,
        )
        self.churned["consumers_created"] += 1
        for pod in pods:
            self.cluster.pod(pod, app=PASSING_APP)
        _wait(
            lambda: self.view.balanced_over(name, pods, PASSING_PARTITIONS),
            f"{name} balanced",
        )
        custom.delete_namespaced_custom_object(
            specs.GROUP, specs.VERSION, NAMESPACE, specs.PLURAL, name, _preload_content=False
        )
        _wait(lambda: not self._exists(name), f"{name} deleted")
        self.churned["consumers_deleted"] += 1
        for pod in pods:
            self.cluster.delete_pod(pod)
        _wait(lambda: not self.view.pods(name), f"{name}'s ConfigMaps gone")

    def _exists(self, name: str) -> bool:
        try:
            self.cluster.custom.get_namespaced_custom_object(
                specs.GROUP, specs.VERSION, NAMESPACE, specs.PLURAL, name
            )
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


# -- sampling


class Sampler:
    """Samples a process every ``every`` seconds in a thread of its own, from ``start``."""

    def __init__(self, pid: int, *, every: float) -> None:
        self.pid = pid
        self.every = every
        self.series: soaking.Series = {
            "t_s": [],
            "rss_mb": [],
            "threads": [],
            "descriptors": [],
            "processes": [],
        }
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self.began = 0.0

    def start(self) -> None:
        self.began = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """One last sample, then the thread ends."""
        self._stopped.set()
        self._thread.join(timeout=10 * self.every)
        self._sample()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._sample()
            self._stopped.wait(self.every)

    def _sample(self) -> None:
        held = soaking.usage(soaking.process_tree(self.pid))
        series, t = self.series, time.monotonic() - self.began
        series["t_s"].append(round(t, 1))
        series["rss_mb"].append(round(held.rss_bytes / 2**20, 2))
        series["threads"].append(held.threads)
        series["descriptors"].append(held.descriptors)
        series["processes"].append(held.processes)
        logger.info(
            "%5.0f s: %.1f MB, %d threads, %d descriptors",
            t,
            held.rss_bytes / 2**20,
            held.threads,
            held.descriptors,
        )


# -- the run


def run(settings: Settings) -> Report:
    # As the consumer soak: a SIGTERM (from `timeout`) unwinds like ^C, stopping every child.
    previous = signal.signal(signal.SIGTERM, soaking._interrupt)
    try:
        return _run(settings)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(settings: Settings) -> Report:
    found: list[Growth] = []
    with (
        tempfile.TemporaryDirectory(prefix="ehb-soak-snapshots-") as snapshots,
        _stack(settings) as (kubeconfig, hubs, store, _server),
    ):
        api = watching.client(kubeconfig)
        world = World(api, settings)
        stopped = threading.Event()
        watcher = threading.Thread(
            target=watching.watch_configmaps,
            args=(api, NAMESPACE, stopped, world.view.on_body),
            daemon=True,
        )
        watcher.start()
        world.cluster.secret("eh", "cs", hubs)
        world.cluster.secret("blob", "cs", store)
        doubles = processes.Child(
            "doubles", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE
        )
        operator: OperatorChild | None = None
        try:
            operator = OperatorChild(
                kubeconfig,
                NAMESPACE,
                snapshots=Path(snapshots) if settings.tracemalloc else None,
            )
            world.start(settings.pods)
            if settings.tracemalloc:
                operator.trace()
            sampler = Sampler(operator.process.pid, every=settings.sample_seconds)
            sampler.start()
            early: Path | None = None
            end = sampler.began + settings.seconds
            while time.monotonic() < end:
                world.round()
                if (
                    settings.tracemalloc
                    and early is None
                    and time.monotonic() >= sampler.began + EARLY_SNAPSHOT * settings.seconds
                ):
                    early = operator.snapshot()
            sampler.stop()
            if early is not None:
                found = growths(early, operator.snapshot())
        finally:
            if operator is not None:
                operator.stop()
            doubles.stop()
            stopped.set()
    return _report(settings, sampler.series, churned=world.churned, growths=found)


def _report(
    settings: Settings,
    series: soaking.Series,
    *,
    churned: Churned,
    growths: list[Growth],
) -> Report:
    seconds = series["t_s"][-1]
    slopes = soaking.second_half_slopes(series, seconds=seconds)
    half = next(i for i, t in enumerate(series["t_s"]) if t >= seconds / 2)

    def flat(value: float | None) -> bool:
        return value is not None and abs(value) * seconds / 120 < soaking.FLAT_COUNT

    rss = slopes["rss_mb_per_min"]
    return {
        "mode": "operator",
        "seconds": round(seconds, 1),
        "partitions": settings.partitions,
        "pods": settings.pods,
        "interval_seconds": INTERVAL_SECONDS,
        "sample_seconds": settings.sample_seconds,
        "churned": churned,
        "rss_mb_start": series["rss_mb"][0],
        "rss_mb_mid": series["rss_mb"][half],
        "rss_mb_end": series["rss_mb"][-1],
        "slopes": slopes,
        "target_rss_mb_per_min": TARGET_RSS_MB_PER_MIN,
        "ok": (
            rss is not None
            and rss <= TARGET_RSS_MB_PER_MIN
            and flat(slopes["threads_per_min"])
            and flat(slopes["descriptors_per_min"])
        ),
        "traced": settings.tracemalloc,
        "growths": growths,
        "samples": series,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """The operator's process (`OperatorChild`)."""
    parser = argparse.ArgumentParser(prog=__name__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--snapshots", type=Path, help="trace allocations; dump here on SIGUSR1")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get(processes.LOG_LEVEL_ENV, "WARNING").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s: %(message)s",
    )
    if args.snapshots is not None:
        _trace_on_signal(args.snapshots)
    serve_operator(args.kubeconfig, args.namespace)
    return 0


def serve_operator(kubeconfig: Path, namespace: str) -> None:
    """The operator as ``ehb operator`` builds it (kopf, adapters, handlers), and nothing of
    a benchmark's own in its process: what is sampled is the operator's. It says it is
    ready, and runs until its stdin closes."""
    api = kubeapi.KubeAPI.from_environment(str(kubeconfig))
    runtime = registering.Operator(
        kube=api,
        hubs=eventhubs.EventHubs(),
        connection=api.connection_info,
    )
    options = running.Options(namespaces=(namespace,), metrics_port=None)
    operator = running.OperatorThread(runtime, options).start(timeout=processes.START_SECONDS)
    try:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)
    finally:
        operator.stop(timeout=processes.STOP_SECONDS)
        api.close()


if __name__ == "__main__":
    sys.exit(main())
