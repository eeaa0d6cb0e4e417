"""A chaos run: the operator and consumer pods under load while things keep breaking.

For a bounded time, at random (seeded) moments, it SIGKILLs consumer pods (they restart, as
with restartPolicy Always), deletes pods and starts replacements, restarts the operator,
injects Blob Storage faults through the fault proxy in front of Azurite (5xx, dropped
requests, delays, 412 bursts) and drops every Event Hubs connection at once. The invariants
are checked throughout and at the end:

- no event lost: every event the emulator holds is processed once the backlog drains;
- no checkpoint regression: a partition's checkpoint sequence number never goes back;
- never two accepted writers for one partition: the checkpoint's epoch never goes back and
  one epoch belongs to one owner (checkpoint writes are owner-checked with If-Match, so a
  fenced-out writer that got through would show as either);
- after the faults stop, balanced again within one cycle plus the hand-off
  (``intervalSeconds + handoffTimeoutSeconds``) once every pod is Ready again (a restarted
  process needs its own start-up time first, which is not the balancer's).

The checkpoints are sampled directly from Azurite (not through the proxy) every
``SAMPLE_S``; a regression that is written and overwritten within one sample is not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from eventhub_balancer import runners
from eventhub_balancer.adapters import blobs, checkpointing
from eventhub_balancer_devstack import azurite, faultproxy
from eventhub_balancer_devstack.scenarios import runs, systems

logger = logging.getLogger(__name__)

#: How often the checkpoint blobs are read for the invariants.
SAMPLE_S = 0.2
#: The longest wait for the pods to be Ready again after the faults stop.
READY_TIMEOUT_S = 90.0
#: The longest wait for balance once the pods are Ready again. Far above the strict bound
#: (``ChaosOptions.balance_bound_s``, what the report's ``ok`` checks) so that a slow machine
#: still measures how long recovery took instead of reporting that it never came.
RECOVERY_TIMEOUT_S = 60.0

ACTIONS = ("kill", "replace", "operator", "blob-faults", "drop-connections")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChaosOptions:
    duration_s: float = 30.0
    pods: int = 3
    partitions: int = 8
    rate: float = 100.0
    interval_seconds: int = 2
    pod_grace_seconds: int = 3
    handoff_timeout_seconds: int = 5
    #: Seconds between two faults: uniform in this range.
    gap_s: tuple[float, float] = (1.0, 3.0)
    seed: int = 0
    drain_timeout_s: float = 90.0
    work_dir: Path | None = None

    @property
    def balance_bound_s(self) -> float:
        return float(self.interval_seconds + self.handoff_timeout_seconds)


class ChaosReport(TypedDict):
    seed: int
    duration_s: float
    actions: dict[str, int]
    produced: int
    processed: int
    lost: int
    duplicates: int
    checkpoint_regressions: list[str]
    writer_conflicts: list[str]
    checkpoint_samples: int
    ready_after_faults_s: float | None
    balanced_after_ready_s: float | None
    balance_bound_s: float
    ok: bool


class CheckpointWatch:
    """Samples every checkpoint blob on the scenario's loop and keeps the violations."""

    def __init__(self, *, site: systems.Site) -> None:
        self.site = site
        self.regressions: list[str] = []
        self.conflicts: list[str] = []
        self.samples = 0
        #: partition -> (sequence number, epoch, owner) last seen.
        self.last: dict[str, tuple[int, int, str]] = {}
        self._owners: dict[tuple[str, int], str] = {}
        self._stop = asyncio.Event()
        self._done: object = None

    def start(self, loop: runners.BackgroundLoop) -> None:
        self._done = loop.submit(self._run())

    def stop(self, loop: runners.BackgroundLoop) -> None:
        loop.call_soon(self._stop.set)
        done = self._done
        if done is not None:
            with contextlib.suppress(Exception):
                done.result(timeout=10)  # type: ignore[attr-defined]

    def check(self, checkpoints: list[checkpointing.Checkpoint]) -> None:
        self.samples += 1
        for cp in checkpoints:
            before = self.last.get(cp.partition)
            if before is not None:
                sequence, epoch, owner = before
                if cp.sequence_number < sequence:
                    self.regressions.append(
                        f"partition {cp.partition}: sequence {sequence} -> {cp.sequence_number}"
                    )
                if cp.epoch < epoch:
                    self.conflicts.append(
                        f"partition {cp.partition}: epoch {epoch} ({owner}) -> "
                        f"{cp.epoch} ({cp.owner_id})"
                    )
            known = self._owners.setdefault((cp.partition, cp.epoch), cp.owner_id)
            if known != cp.owner_id:
                self.conflicts.append(
                    f"partition {cp.partition}: epoch {cp.epoch} written by {known} "
                    f"and {cp.owner_id}"
                )
            self.last[cp.partition] = (cp.sequence_number, cp.epoch, cp.owner_id)

    async def _run(self) -> None:
        site = self.site
        async with blobs.open_container(
            container_name=site.container, connection_string=site.stack.blob_connection_string
        ) as container:
            store = checkpointing.CheckpointStore(
                container,
                fully_qualified_namespace=systems.FULLY_QUALIFIED_NAMESPACE,
                eventhub_name=site.hub,
                consumer_group=systems.CONSUMER_GROUP,
                owner_id="chaos-watch",
            )
            while not self._stop.is_set():
                try:
                    self.check(await store.list())
                except Exception as e:  # Azurite itself is never faulted; log and go on
                    logger.warning("checkpoint sample failed: %s", e)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=SAMPLE_S)


class Chaos:
    """Runs the faults against a started scenario."""

    def __init__(
        self,
        *,
        scenario: runs.ScenarioRun,
        system: systems.OursSystem,
        proxy: faultproxy.FaultProxy,
        options: ChaosOptions,
    ) -> None:
        self.scenario = scenario
        self.system = system
        self.proxy = proxy
        self.options = options
        self.rng = random.Random(options.seed)
        self.actions = dict.fromkeys(ACTIONS, 0)
        self._faults_on = False

    def act(self, action: str) -> None:
        kubelet = self.scenario.kubelet
        assert kubelet is not None
        names = kubelet.names()
        logger.info("chaos: %s", action)
        if action == "kill" and names:
            kubelet.kill(self.rng.choice(names))
        elif action == "replace" and names:
            kubelet.delete(self.rng.choice(names))
            kubelet.create()
        elif action == "operator":
            self.system.stop_operator()
            self.system.start_operator()
        elif action == "blob-faults":
            if self._faults_on:
                self.proxy.faults.clear()
            else:
                self.proxy.faults.set(
                    delay=0.05,
                    delay_rate=0.3,
                    status_5xx_rate=0.15,
                    drop_rate=0.05,
                    drop_response_rate=0.05,
                    burst_412=3,
                    seed=self.rng.randrange(1 << 30),
                )
            self._faults_on = not self._faults_on
        elif action == "drop-connections":
            self.scenario.site.stack.eventhubs.disconnect_all()
        self.actions[action] += 1

    def run_faults(self, duration_s: float) -> None:
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            self.act(self.rng.choice(ACTIONS))
            wait = self.rng.uniform(*self.options.gap_s)
            until = min(deadline, time.monotonic() + wait)
            while time.monotonic() < until:
                time.sleep(runs.POLL_S)
                self.scenario.observe()

    def stop_faults(self) -> None:
        self.proxy.faults.clear()
        self._faults_on = False
        if self.system.operator is None:
            self.system.start_operator()
        kubelet = self.scenario.kubelet
        assert kubelet is not None
        kubelet.scale(self.options.pods)

    def wait(self, predicate: Callable[[], bool], timeout_s: float) -> float | None:
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return round(time.monotonic() - started, 3)
            time.sleep(runs.POLL_S)
        return None


def run(options: ChaosOptions, *, observer: runs.Observer) -> ChaosReport:
    hub = "chaos"
    with (
        runs.local_stack(hubs={hub: options.partitions}, work_dir=options.work_dir) as (
            stack,
            loop,
            root,
        ),
        faultproxy.FaultProxy(stack.azurite.port) as proxy,
    ):
        site = runs.make_site(
            stack=stack,
            loop=loop,
            root=root,
            label="chaos",
            hub=hub,
            interval_seconds=options.interval_seconds,
            blob_connection_string=azurite.connection_string(host=proxy.host, port=proxy.port),
        )
        system = systems.OursSystem(
            site,
            pod_grace_seconds=options.pod_grace_seconds,
            handoff_timeout_seconds=options.handoff_timeout_seconds,
        )
        scenario = runs.ScenarioRun(
            site=site,
            system=system,
            options=runs.ScenarioOptions(
                partitions=options.partitions,
                rate=options.rate,
                interval_seconds=options.interval_seconds,
                steps=(
                    runs.Step(
                        name=f"start {options.pods} pods", action="scale", value=options.pods
                    ),
                ),
                drain_timeout_s=options.drain_timeout_s,
            ),
            observer=observer,
        )
        watch = CheckpointWatch(site=site)
        chaos = Chaos(scenario=scenario, system=system, proxy=proxy, options=options)
        scenario.start()
        try:
            watch.start(loop)
            scenario.results.append(scenario.perform(scenario.steps[0]))
            chaos.run_faults(options.duration_s)
            chaos.stop_faults()
            ready_s = chaos.wait(
                lambda: len((m := scenario.members())[1]) == len(m[0]) == options.pods,
                READY_TIMEOUT_S,
            )
            balanced_s = chaos.wait(
                lambda: scenario.observe().balanced,
                max(options.balance_bound_s, RECOVERY_TIMEOUT_S),
            )
            scenario.drain()
            watch.stop(loop)
        finally:
            scenario.stop()
        summary = scenario.summary()
    ok = (
        summary["lost"] == 0
        and not watch.regressions
        and not watch.conflicts
        and watch.samples > 0
        and ready_s is not None
        and balanced_s is not None
        and balanced_s <= options.balance_bound_s
    )
    return {
        "seed": options.seed,
        "duration_s": options.duration_s,
        "actions": chaos.actions,
        "produced": summary["produced"],
        "processed": summary["processed"],
        "lost": summary["lost"],
        "duplicates": summary["duplicates"],
        "checkpoint_regressions": watch.regressions,
        "writer_conflicts": watch.conflicts,
        "checkpoint_samples": watch.samples,
        "ready_after_faults_s": ready_s,
        "balanced_after_ready_s": balanced_s,
        "balance_bound_s": options.balance_bound_s,
        "ok": ok,
    }
