"""Running a scenario: steps against a system under load, timed, and every event counted.

A scenario is a list of `Step`s (scale the consumer workload, delete a pod, SIGKILL one, grow
the hub). After each step the runner looks at the system's `Snapshot` until it is balanced over
the pods that should now share the partitions (again at every change of the namespace's Pods
and ConfigMaps, `changes`, and at least every `POLL_S`), and records how long that took, up to
the look that found it balanced, and how many partitions changed pod. Meanwhile a producer
sends at a bounded rate and every pod records each batch it finished (`recording`). At the
end the producer stops, the backlog drains, and the records are held against what the
emulator holds: events lost (produced, never processed) and duplicates (processed more than
once), the latter attributed to the step during which the repeat happened.

Everything is bounded: each step waits at most ``balance_timeout_s`` (a step that does not
balance in time is reported with ``balanced_s = None``, never hidden), the drain at most
``drain_timeout_s``.

The steps, their results and the live view are in `models` (the view is built in
`liveviews`), the summary's counting in `summaries`, the stack and a site on it in `sites`,
the per-step table in `tables`; the names that callers use are imported here under their old
names too.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer_devstack import kubelet, recording
from eventhub_balancer_devstack.scenarios import (
    changes,
    liveviews,
    producing,
    sites,
    summaries,
    systems,
)
from eventhub_balancer_devstack.scenarios.models import PLANNED as PLANNED
from eventhub_balancer_devstack.scenarios.models import STARTING as STARTING
from eventhub_balancer_devstack.scenarios.models import Kind as Kind
from eventhub_balancer_devstack.scenarios.models import Observer as Observer
from eventhub_balancer_devstack.scenarios.models import PodView as PodView
from eventhub_balancer_devstack.scenarios.models import Progress as Progress
from eventhub_balancer_devstack.scenarios.models import ScenarioOptions as ScenarioOptions
from eventhub_balancer_devstack.scenarios.models import Step as Step
from eventhub_balancer_devstack.scenarios.models import StepResult as StepResult
from eventhub_balancer_devstack.scenarios.models import StepSummary as StepSummary
from eventhub_balancer_devstack.scenarios.models import Summary as Summary
from eventhub_balancer_devstack.scenarios.models import standard_steps as standard_steps
from eventhub_balancer_devstack.scenarios.sites import local_stack as local_stack
from eventhub_balancer_devstack.scenarios.sites import make_site as make_site
from eventhub_balancer_devstack.scenarios.tables import format_steps as format_steps

logger = logging.getLogger(__name__)

#: How often the runner looks at the system and the records at least; it also looks at every
#: change of the namespace's Pods and ConfigMaps (`changes`).
POLL_S = 0.1
#: How often the partition properties are read for the lag (each read hops onto the
#: emulator's loop, so not on every poll).
LAG_EVERY_S = 1.0
#: The longest wait for the kubelet to see a killed process (it probes every 0.2 s).
KILL_NOTICED_S = 3.0
#: The bearer token of the local kubelet's kubeconfig: a chaos run's API outage
#: (`LocalKubeAPI.pause`) spares it, as a node goes on restarting its containers.
KUBELET_TOKEN = "ehb-local-kubelet"


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
        self._changes: changes.NamespaceChanges | None = None
        self._observed_at = self._started
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
        self.system.start()
        self._api_client = sites.kubelet_client(self.site, token=KUBELET_TOKEN)
        self.kubelet = kubelet.LocalKubelet(
            api_client=self._api_client,
            namespace=self.site.namespace,
            template=self.system.template(),
        )
        self.system.attach(self.kubelet)
        self.kubelet.start()
        self._changes = changes.NamespaceChanges(self._api_client, self.site.namespace)
        self._changes.start()
        self.producer = producing.Producer(
            connection_string=self.site.eventhubs_connection_string,
            hub=self.site.hub,
            rate=self.options.rate,
            partitions=self.site.partitions,
        )
        self._producer_done = self.site.loop.submit(self.producer.run())

    def stop(self) -> None:
        """Each part is stopped even when stopping one before it failed (a second Ctrl-C,
        say): a pod or the operator left running keeps this process from exiting."""
        with contextlib.ExitStack() as parts:  # the callbacks run last first
            if self._api_client is not None:
                parts.callback(self._api_client.close)
            parts.callback(self.system.stop)
            if self.kubelet is not None:
                parts.callback(self.kubelet.stop, grace_s=systems.TERMINATION_GRACE_S)
            if self._changes is not None:
                parts.callback(self._changes.stop)
            self.stop_producer()

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
        self._observed_at = time.monotonic()  # what it finds held at least from then on
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
            # The snapshot holds from the moment it was read on, not from when it is judged.
            seen = max(self._observed_at, started + (up_s or 0.0))
            if victim and failover_s is None and systems.taken_over(snapshot, held, gone=gone):
                failover_s = round(seen - started, 3)
            done = snapshot.balanced and up_s is not None
            if done and (not victim or failover_s is not None):
                ended = seen
                break
            if now >= deadline:
                ended = now
                break
            if self._changes is None:
                time.sleep(POLL_S)
            else:
                self._changes.wait(POLL_S)
            snapshot = self.observe()
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
        self._recent = [b for b in self._recent if b.at > now - liveviews.RATE_WINDOW_S] + batches
        if time.monotonic() - self._lag_at > LAG_EVERY_S:
            self._lag_at = time.monotonic()
            self._last_sequence = {p: n - 1 for p, n in self.produced_by_partition().items()}

    def summary(self) -> Summary:
        return summaries.summarize(
            results=self.results,
            tally=self.tally,
            produced=self.produced_by_partition(),
            site=self.site,
        )

    # -- the live view

    def progress(self) -> Progress:
        return liveviews.progress(
            label=self.system.label,
            steps=self.steps,
            step_index=self._step_index,
            phase=self._phase,
            elapsed_s=time.monotonic() - self._started,
            step_elapsed_s=time.monotonic() - self._step_started,
            snapshot=self._snapshot,
            recent=self._recent,
            tally=self.tally,
            last_sequence=self._last_sequence,
            results=self.results,
            final_pods=self._final_pods,
            local_kubelet=self.kubelet,
            ready=self._ready,
        )

    def _notify(self) -> None:
        self.observer(self.progress())
