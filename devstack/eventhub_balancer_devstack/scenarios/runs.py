"""Running a scenario: steps against a system under load, timed, and every event counted.

A scenario is a list of `Step`s (scale the consumer workload, delete a pod, SIGKILL one, grow
the hub). After each step the runner polls the system's `Snapshot` until it is balanced over
the pods that should now share the partitions, and records how long that took and how many
partitions changed pod. Meanwhile a producer sends at a bounded rate and every pod records
each batch it finished (`recording`). At the end the producer stops, the backlog drains, and
the records are held against what the emulator holds: events lost (produced, never
processed) and duplicates (processed more than once), the latter attributed to the step
during which the repeat happened.

Everything is bounded: each step waits at most ``balance_timeout_s`` (a step that does not
balance in time is reported with ``balanced_s = None``, never hidden), the drain at most
``drain_timeout_s``.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from eventhub_balancer import errors, runners
from eventhub_balancer_devstack import kubelet, recording
from eventhub_balancer_devstack.kube import LocalKubeAPI, kubeconfigs
from eventhub_balancer_devstack.scenarios import producing, systems
from eventhub_balancer_devstack.stacks import LocalStack, StackOptions

logger = logging.getLogger(__name__)

#: How often the runner looks at the system and the records: the resolution of the figures.
POLL_S = 0.1
#: How often the partition properties are read for the lag (each read hops onto the
#: emulator's loop, so not on every poll).
LAG_EVERY_S = 1.0
#: Events/s per pod are averaged over this window.
RATE_WINDOW_S = 3.0
#: The longest wait for the kubelet to see a killed process (it probes every 0.2 s).
KILL_NOTICED_S = 3.0
#: The bearer token of the local kubelet's kubeconfig: a chaos run's API outage
#: (`LocalKubeAPI.pause`) spares it, as a node goes on restarting its containers.
KUBELET_TOKEN = "ehb-local-kubelet"
#: The longest any single call onto the I/O loop (the producer, checkpoint reads) may take
#: before the caller gives up, and the longest wait for that loop to stop.
CALL_TIMEOUT_S = 30.0
LOOP_STOP_S = 10.0

Action = Literal["scale", "delete", "kill", "grow"]
#: What a step did, for the figures: a ``scale`` from zero pods is the start.
Kind = Literal["start", "scale-out", "scale-in", "delete", "kill", "grow"]
#: Steps that a user or an autoscaler plans; only a crash (``kill``) is not.
PLANNED: frozenset[Kind] = frozenset({"start", "scale-out", "scale-in", "delete", "grow"})
#: Steps that start a pod's process (a new pod, or a killed one restarted); the others start
#: none, and their time to balance counts from the action.
STARTING: frozenset[Kind] = frozenset({"start", "scale-out", "kill"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    action: Action
    #: replicas for ``scale``, the partition count for ``grow``.
    value: int = 0


def standard_steps(*, partitions: int, grow_to: int) -> tuple[Step, ...]:
    """The demo's scenario: 2 -> 6 -> 3 pods, a deletion, a SIGKILL, a grown hub."""
    return (
        Step(name="start 2 pods", action="scale", value=2),
        Step(name="scale 2 -> 6", action="scale", value=6),
        Step(name="scale 6 -> 3", action="scale", value=3),
        Step(name="delete a pod", action="delete"),
        Step(name="SIGKILL a pod", action="kill"),
        Step(name=f"grow {partitions} -> {grow_to} partitions", action="grow", value=grow_to),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScenarioOptions:
    partitions: int = 32
    grow_to: int = 40
    #: Events per second over the whole hub.
    rate: float = 300.0
    interval_seconds: int = 5
    steps: tuple[Step, ...] | None = None
    #: Time to watch the steady state after a step balanced, before the next one.
    settle_s: float = 3.0
    balance_timeout_s: float = 60.0
    drain_timeout_s: float = 60.0
    #: Where the records and pod logs go (a temporary directory when None; kept when given).
    work_dir: Path | None = None

    def scenario(self) -> tuple[Step, ...]:
        if self.steps is not None:
            return self.steps
        return standard_steps(partitions=self.partitions, grow_to=self.grow_to)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepResult:
    step: Step
    started: float
    ended: float
    #: Seconds from the action to the first balanced snapshot; None: not within the timeout.
    end_to_end_s: float | None
    #: Partitions that changed pod between the balanced states before and after the step.
    moved: int
    #: Seconds until every pod's process was up (started and in touch with what coordinates
    #: it: `systems.System.up`); 0 when the step starts no process (`STARTING`). New or
    #: restarted processes take seconds to start on a loaded machine, whichever balancer they
    #: run.
    pods_up_s: float | None = None
    #: For a deletion or a SIGKILL: seconds until every partition the pod held was held and
    #: taken up by a Ready pod again (another pod, after a deletion); None: not in time.
    failover_s: float | None = None
    #: The pod deleted or killed by the step.
    pod: str | None = None
    kind: Kind = "start"
    reason: str = ""

    @property
    def balanced_s(self) -> float | None:
        """The balancer's own time to balance: from every pod being up to balanced."""
        if self.end_to_end_s is None or self.pods_up_s is None:
            return None
        return round(max(0.0, self.end_to_end_s - self.pods_up_s), 3)


class StepSummary(TypedDict):
    step: str
    kind: Kind
    #: From every pod of the step being up (`StepResult.pods_up_s`) to balanced: the headline.
    balanced_s: float | None
    #: From the step's action to balanced, the pods' start-up included.
    end_to_end_s: float | None
    pods_up_s: float | None
    failover_s: float | None
    pod: str | None
    moved: int
    duplicates: int
    #: Events produced during the step (by their enqueued time) that were never processed.
    lost: int


class Summary(TypedDict):
    produced: int
    processed: int
    lost: int
    duplicates: int
    steps: list[StepSummary]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodView:
    name: str
    ready: bool
    restarts: int
    partitions: tuple[str, ...]
    lag: int
    events_per_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    """What the live view shows; produced on every poll."""

    label: str
    step_index: int  # 0-based; == len(steps) when draining
    steps: tuple[Step, ...]
    phase: str  # "balancing", "steady", "draining", "done"
    elapsed_s: float
    step_elapsed_s: float
    snapshot: systems.Snapshot | None
    pods: tuple[PodView, ...]
    produced: int
    processed: int
    duplicates: int
    lag: int
    events_per_s: float
    results: tuple[StepResult, ...]


Observer = Callable[[Progress], None]


def _quiet(_: Progress) -> None:
    return None


class ScenarioRun:
    """One run of the steps against one system on an already started stack."""

    def __init__(
        self,
        *,
        site: systems.Site,
        system: systems.System,
        options: ScenarioOptions,
        observer: Observer = _quiet,
    ) -> None:
        self.site = site
        self.system = system
        self.options = options
        self.observer = observer
        self.steps = options.scenario()
        self.tally = recording.Tally()
        self.reader = recording.RecordReader(site.record_dir)
        self.results: list[StepResult] = []
        self.kubelet: kubelet.LocalKubelet | None = None
        self.producer: producing.Producer | None = None
        self._producer_done: Any = None
        self._recent: list[recording.Batch] = []
        self._lag_at = 0.0
        self._last_sequence: dict[str, int] = {}
        self._started = time.monotonic()
        self._step_started = self._started
        self._step_index = 0
        self._phase = "starting"
        self._snapshot: systems.Snapshot | None = None
        self._api_client: Any = None
        #: The pods as last seen before they were stopped, for the closing frame.
        self._final_pods: tuple[PodView, ...] | None = None

    # -- the whole run

    def run(self) -> Summary:
        self._started = time.monotonic()
        self.start()
        try:
            for index, step in enumerate(self.steps):
                self._step_index = index
                self.results.append(self.perform(step))
                self.settle(self.options.settle_s)
            self._step_index = len(self.steps)
            self.drain()
            self._final_pods = self.progress().pods
        finally:
            self.stop()
        self._phase = "done"
        self._notify()
        return self.summary()

    def start(self) -> None:
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        self.system.start()
        configuration = k8s.Configuration()
        kubeconfig = kubeconfigs.write(
            self.site.kubeconfig.with_name(f"{self.site.namespace}-kubelet.kubeconfig"),
            server=self.site.stack.kube.url,
            namespace=self.site.namespace,
            user={"token": KUBELET_TOKEN},
        )
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
        self._api_client = k8s.ApiClient(configuration)
        self.kubelet = kubelet.LocalKubelet(
            api_client=self._api_client,
            namespace=self.site.namespace,
            template=self.system.template(),
        )
        self.system.attach(self.kubelet)
        self.kubelet.start()
        self.producer = producing.Producer(
            connection_string=self.site.eventhubs_connection_string,
            hub=self.site.hub,
            rate=self.options.rate,
            partitions=self.site.partitions,
        )
        self._producer_done = self.site.loop.submit(self.producer.run())

    def stop(self) -> None:
        self.stop_producer()
        if self.kubelet is not None:
            self.kubelet.stop(grace_s=systems.TERMINATION_GRACE_S)
        self.system.stop()
        if self._api_client is not None:
            self._api_client.close()

    def stop_producer(self) -> None:
        if self.producer is None or self._producer_done is None:
            return
        self.site.loop.call_soon(self.producer.stop)
        with contextlib.suppress(Exception):
            self._producer_done.result(timeout=15)
        if self._producer_done.done() and self._producer_done.exception() is not None:
            logger.warning("the producer failed: %s", self._producer_done.exception())
        self._producer_done = None

    # -- steps

    def members(self) -> tuple[list[str], frozenset[str]]:
        assert self.kubelet is not None
        names = self.kubelet.names()
        ready = frozenset(n for n in names if self._ready(n))
        return names, ready

    def _ready(self, name: str) -> bool:
        assert self.kubelet is not None
        try:
            return self.kubelet.is_ready(name)
        except KeyError:
            return False

    def observe(self) -> systems.Snapshot:
        names, ready = self.members()
        self._snapshot = self.system.snapshot(members=names, ready=ready)
        self._read_records()
        self._notify()
        return self._snapshot

    def act(self, step: Step) -> str | None:
        """Carry the step out; returns the pod it deleted or killed."""
        assert self.kubelet is not None
        names = self.kubelet.names()
        if step.action == "scale":
            self.kubelet.scale(step.value)
        elif step.action == "delete":
            if not names:
                raise errors.InvalidInput("steps", f"{step.name}: there is no pod to delete")
            self.kubelet.delete(names[0])
            return names[0]
        elif step.action == "kill":
            if not names:
                raise errors.InvalidInput("steps", f"{step.name}: there is no pod to kill")
            self.kubelet.kill(names[0])
            # The kubelet's probe loop notices the death within a probe interval; until then
            # the old state would pass for balanced.
            deadline = time.monotonic() + KILL_NOTICED_S
            while self._ready(names[0]) and time.monotonic() < deadline:
                time.sleep(kubelet.PROBE_INTERVAL_S / 4)
            return names[0]
        elif step.action == "grow":
            self.site.stack.eventhubs.add_partitions(self.site.hub, step.value)
        return None

    def perform(self, step: Step) -> StepResult:
        before = self._snapshot.owners if self._snapshot is not None else {}
        self._phase = "balancing"
        started = self._step_started = time.monotonic()
        logger.info("step %s", step.name)
        kind = self._kind(step)
        victim = self.act(step)
        held = [p for p, pod in before.items() if pod == victim] if victim else []
        gone = victim if step.action == "delete" else None
        deadline = started + self.options.balance_timeout_s
        snapshot = self.observe()
        # A step that starts no process counts from its action: the first poll's time (the
        # action itself and a listing, 10-110 ms) is the balancer's, not a pod's start-up.
        up_s: float | None = None if kind in STARTING else 0.0
        failover_s: float | None = None
        while True:
            now = time.monotonic()
            if up_s is None and self._all_up():
                up_s = round(now - started, 3)
            if victim and failover_s is None and systems.taken_over(snapshot, held, gone=gone):
                failover_s = round(now - started, 3)
            done = snapshot.balanced and up_s is not None
            if done and (not victim or failover_s is not None):
                break
            if now >= deadline:
                break
            time.sleep(POLL_S)
            snapshot = self.observe()
        ended = time.monotonic()
        end_to_end_s = round(ended - started, 3) if snapshot.balanced else None
        moved = sum(1 for p, pod in before.items() if snapshot.owners.get(p, pod) != pod)
        result = StepResult(
            step=step,
            started=started,
            ended=ended,
            end_to_end_s=end_to_end_s,
            moved=moved,
            pods_up_s=up_s,
            failover_s=failover_s,
            pod=victim,
            kind=kind,
            reason=snapshot.reason,
        )
        logger.info(
            "step %s: balanced_s=%s end_to_end_s=%s pods_up_s=%s failover_s=%s moved=%d (%s)",
            step.name,
            result.balanced_s,
            end_to_end_s,
            up_s,
            failover_s,
            moved,
            snapshot.reason,
        )
        self._phase = "steady"
        return result

    def _kind(self, step: Step) -> Kind:
        assert self.kubelet is not None
        if step.action != "scale":
            return step.action
        replicas = len(self.kubelet.names())
        if replicas == 0:
            return "start"
        return "scale-out" if step.value > replicas else "scale-in"

    def _all_up(self) -> bool:
        """Every pod's process is up (`systems.System.up`), deleted ones aside."""
        assert self.kubelet is not None
        for name in self.kubelet.names():
            try:
                port = self.kubelet.port(name)
            except KeyError:
                return False
            if not self.system.up(port):
                return False
        return True

    def settle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            self.observe()

    def drain(self, drained: Callable[[dict[str, int]], bool] | None = None) -> None:
        """Stop producing and wait until every produced event was processed (bounded).

        ``drained``, given the events produced per partition, says when the backlog is gone
        instead (the chaos run: a dead-lettered last event is never processed, only passed).
        """
        self._phase = "draining"
        self._step_index = len(self.steps)
        self._step_started = time.monotonic()
        self.stop_producer()
        deadline = time.monotonic() + self.options.drain_timeout_s
        while time.monotonic() < deadline:
            self.observe()
            produced = self.produced_by_partition()
            if drained is not None:
                if drained(produced):
                    break
            elif all(self.tally.highest.get(p, -1) >= n - 1 for p, n in produced.items()):
                break
            time.sleep(POLL_S)
        # Let a batch that was recorded just now (a duplicate in the making) land as well.
        time.sleep(1.0)
        self._read_records()

    # -- counting

    def produced_by_partition(self) -> dict[str, int]:
        eventhubs = self.site.stack.eventhubs
        result = {}
        for partition in self.site.partitions():
            info = eventhubs.partition_info(self.site.hub, partition)
            result[partition] = 0 if info.is_empty else info.last_enqueued_sequence_number + 1
        return result

    def _read_records(self) -> None:
        batches = self.reader.read_new()
        self.tally.add(batches)
        now = time.time()
        self._recent = [b for b in self._recent if b.at > now - RATE_WINDOW_S] + batches
        if time.monotonic() - self._lag_at > LAG_EVERY_S:
            self._lag_at = time.monotonic()
            self._last_sequence = {p: n - 1 for p, n in self.produced_by_partition().items()}

    def summary(self) -> Summary:
        produced = self.produced_by_partition()
        starts = [r.started for r in self.results]
        # Repeats are stamped with the wall clock; steps with the monotonic one.
        offset = time.time() - time.monotonic()
        per_step = [0] * len(self.results)
        for at, _, _ in self.tally.repeats if self.results else ():
            index = bisect.bisect_right(starts, at - offset) - 1
            per_step[max(0, index)] += 1
        missing = self.tally.missing(produced)
        lost_per_step = [0] * len(self.results)
        enqueued: dict[str, dict[int, float]] = {}
        for partition, n in missing if self.results else ():
            if partition not in enqueued:
                enqueued[partition] = {
                    e.sequence_number: e.enqueued_ms / 1000
                    for e in self.site.stack.eventhubs.event_positions(self.site.hub, partition)
                }
            at = enqueued[partition].get(n, 0.0)
            index = bisect.bisect_right(starts, at - offset) - 1
            lost_per_step[max(0, index)] += 1
        return {
            "produced": sum(produced.values()),
            "processed": self.tally.processed,
            "lost": len(missing),
            "duplicates": self.tally.duplicates,
            "steps": [
                {
                    "step": r.step.name,
                    "kind": r.kind,
                    "balanced_s": r.balanced_s,
                    "end_to_end_s": r.end_to_end_s,
                    "pods_up_s": r.pods_up_s,
                    "failover_s": r.failover_s,
                    "pod": r.pod,
                    "moved": r.moved,
                    "duplicates": per_step[i],
                    "lost": lost_per_step[i],
                }
                for i, r in enumerate(self.results)
            ],
        }

    # -- the live view

    def progress(self) -> Progress:
        snapshot = self._snapshot
        now = time.time()
        window = [b for b in self._recent if b.at > now - RATE_WINDOW_S]
        rates: dict[str, float] = {}
        for batch in window:
            rates[batch.pod] = rates.get(batch.pod, 0.0) + batch.size / RATE_WINDOW_S
        held: dict[str, list[str]] = {}
        if snapshot is not None:
            for partition, pod in snapshot.owners.items():
                held.setdefault(pod, []).append(partition)
        lag_of = {
            p: max(0, last - self.tally.highest.get(p, -1))
            for p, last in self._last_sequence.items()
        }
        pods: list[PodView] = list(self._final_pods or ())
        if self.kubelet is not None and self._final_pods is None:
            for name in self.kubelet.names():
                mine = tuple(sorted(held.get(name, []), key=_partition_key))
                restarts = 0
                with contextlib.suppress(KeyError):
                    restarts = self.kubelet.restarts(name)
                pods.append(
                    PodView(
                        name=name,
                        ready=self._ready(name),
                        restarts=restarts,
                        partitions=mine,
                        lag=sum(lag_of.get(p, 0) for p in mine),
                        events_per_s=round(rates.get(name, 0.0), 1),
                    )
                )
        return Progress(
            label=self.system.label,
            step_index=self._step_index,
            steps=self.steps,
            phase=self._phase,
            elapsed_s=time.monotonic() - self._started,
            step_elapsed_s=time.monotonic() - self._step_started,
            snapshot=snapshot,
            pods=tuple(pods),
            # The hub's counts are read once a second, the records on every poll: what was
            # processed was produced, so the larger figure is the closer one.
            produced=max(sum(n + 1 for n in self._last_sequence.values()), self.tally.processed),
            processed=self.tally.processed,
            duplicates=self.tally.duplicates,
            lag=sum(lag_of.values()),
            events_per_s=round(sum(rates.values()), 1),
            results=tuple(self.results),
        )

    def _notify(self) -> None:
        self.observer(self.progress())


def _partition_key(partition: str) -> tuple[int, str]:
    return (int(partition), partition) if partition.isdigit() else (1 << 30, partition)


# -- the stack and a site on it


@contextlib.contextmanager
def local_stack(
    *,
    hubs: dict[str, int],
    work_dir: Path | None = None,
    kube: Callable[[Path], LocalKubeAPI] | None = None,
) -> Iterator[tuple[LocalStack, runners.BackgroundLoop, Path]]:
    """The local stack on free ports, an I/O loop, and a work directory; stopped on exit.
    ``kube``: makes the Kubernetes API server from the work directory, instead of one in
    this process."""
    temporary = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="ehb-demo-")) if work_dir is None else work_dir
    root.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(
        StackOptions(
            hubs=hubs,
            eventhubs_port=0,
            blob_port=0,
            kube_port=0,
            state_dir=root,
        ),
        kube=kube(root) if kube is not None else None,
    )
    loop = runners.BackgroundLoop(name="scenario-io", timeout=CALL_TIMEOUT_S).start()
    try:
        with stack:
            yield stack, loop, root
    finally:
        try:
            loop.stop(timeout=LOOP_STOP_S)
        except TimeoutError:
            logger.warning("the scenario's I/O loop did not stop in %g s", LOOP_STOP_S)
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def make_site(
    *,
    stack: LocalStack,
    loop: runners.BackgroundLoop,
    root: Path,
    label: str,
    hub: str,
    interval_seconds: int,
    blob_connection_string: str | None = None,
) -> systems.Site:
    """A namespace, record and log directories, and a checkpoint container of its own."""
    suffix = uuid.uuid4().hex[:6]
    record_dir = root / label / "records"
    log_dir = root / label / "logs"
    record_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    return systems.Site(
        stack=stack,
        loop=loop,
        namespace=f"{label}-{suffix}",
        hub=hub,
        consumer=hub,
        container=f"checkpoints-{label}-{suffix}",
        record_dir=record_dir,
        log_dir=log_dir,
        blob_connection_string=blob_connection_string or stack.blob_connection_string,
        interval_seconds=interval_seconds,
    )


def format_steps(results: Sequence[StepSummary]) -> list[str]:
    """The per-step table of a summary, for terminals."""

    def seconds(value: float | None, missing: str) -> str:
        return missing if value is None else f"{value:.2f} s"

    lines = [
        f"{'step':<28} {'pods up':>8} {'balanced':>9} {'end to end':>10} {'failover':>9} "
        f"{'moved':>6} {'dup':>5} {'lost':>5}"
    ]
    for r in results:
        failover = "-" if r["pod"] is None else seconds(r["failover_s"], "timeout")
        lines.append(
            f"{r['step']:<28} {seconds(r['pods_up_s'], 'timeout'):>8} "
            f"{seconds(r['balanced_s'], 'timeout'):>9} {seconds(r['end_to_end_s'], 'timeout'):>10} "
            f"{failover:>9} {r['moved']:>6} {r['duplicates']:>5} {r['lost']:>5}"
        )
    return lines
