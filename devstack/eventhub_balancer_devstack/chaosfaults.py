"""The faults of the chaos run (`chaos`): which there are (`FAULTS`), the run's options, and
`Chaos`, which commits them against a started scenario, each kind by its own means (a killed
or deleted pod, a restarted operator, the blob store or AMQP cut by the fault proxy, poison
and hanging batches, a paused or lagging Kubernetes API, a moved hub, watches that end or go
silent)."""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from pathlib import Path
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, podassignments
from eventhub_balancer_devstack import (
    chaoshandlers,
    chaoswatches,
    epochledgers,
    faultproxy,
    kubeservers,
)
from eventhub_balancer_devstack.kube import LocalKubeAPI
from eventhub_balancer_devstack.scenarios import operatorsystems, runs, systems

logger = logging.getLogger(__name__)

#: The longest outage of the Kubernetes API; a run also never pauses for more than half of
#: its fault time, nor beyond its end.
APIPAUSE_MAX_S = 60.0
#: The longest wait for a fence to catch after a ``midfence`` fault armed the lease trap.
MIDFENCE_WAIT_S = 10.0
#: The pods' ``--stuck-seconds``, and how long a ``hang`` fault's handler call sleeps.
STUCK_SECONDS = 3.0
HANG_SECONDS = STUCK_SECONDS + 2.0
#: How late a ``watchlag`` fault delivers watch events: far above the operator's 5 s wait for
#: the echo of its own writes (`rosters.ECHO_SECONDS`), and above the 60 s it once waited,
#: as in the failure that issue 24 of this project replays.
WATCHLAG_S = 75.0
#: The longest a ``watchlag`` fault lasts (it also ends with the run's faults).
WATCHLAG_MAX_S = 150.0
#: The resources whose watches a ``watchlag`` fault delays: the operator's record (the CR)
#: and what it told the pods (their ConfigMaps).
WATCHLAG_PLURALS = ("eventhubconsumers", "configmaps")
#: How long a ``relist`` fault ends streams and answers resumes with 410 Gone; a stream
#: opened meanwhile (after its client listed again) lives `RELIST_STREAM_S` first.
RELIST_S = 2.0
RELIST_STREAM_S = 1.0
#: How long a ``watchstall`` fault keeps the pod watches silent: beyond the operator's 10 s
#: watch inactivity timeout and kopf's own default of 70 s, so that every reconnection
#: meets the same silence.
WATCHSTALL_S = 80.0
FAULTS = (
    "kill",
    "delete",
    "operator",
    "blob",
    "amqp",
    "poison",
    "hang",
    "apipause",
    "midfence",
    "specchange",
    "watchlag",
    "relist",
    "watchstall",
)
#: Faults committed at most once per run (each is long, or moves every partition).
ONCE = frozenset({"apipause", "specchange", "watchlag", "watchstall"})
#: Faults that need the Kubernetes API answering (skipped while it is paused).
NEED_API = frozenset({"operator", "midfence", "apipause"})
#: Faults that only the local API commits on demand: a real API server has no door to pause
#: it or to delay, silence or end its watches (``--kube real`` runs the others).
LOCAL_API_ONLY = frozenset({"apipause", "watchlag", "relist", "watchstall"})


def parse_faults(text: str, *, kube: kubeservers.Kind = "local") -> tuple[str, ...]:
    """``--faults kill,poison`` -> the kinds, in `FAULTS` order; ``all`` (or empty) is all
    that the server can take (on a real one, all but `LOCAL_API_ONLY`)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or names == ["all"]:
        return FAULTS if kube == "local" else tuple(f for f in FAULTS if f not in LOCAL_API_ONLY)
    local_only = sorted(set(names) & LOCAL_API_ONLY)
    if kube == "real" and local_only:
        raise errors.InvalidInput(
            "--faults",
            f"{', '.join(local_only)} need the local API: leave them out or use --kube local",
        )
    unknown = sorted(set(names) - set(FAULTS))
    if unknown:
        raise errors.InvalidInput(
            "--faults",
            f"unknown fault kind(s) {', '.join(unknown)}: use 'all' or a comma-separated "
            f"list of {', '.join(FAULTS)}",
        )
    return tuple(f for f in FAULTS if f in names)


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
    faults: tuple[str, ...] = FAULTS
    drain_timeout_s: float = 90.0
    work_dir: Path | None = None
    kube: kubeservers.Kind = "local"

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise errors.InvalidInput("--seconds", f"{self.duration_s} is not above 0")
        if not self.faults:
            raise errors.InvalidInput("--faults", f"name at least one of {', '.join(FAULTS)}")
        parse_faults(",".join(self.faults), kube=self.kube)

    @property
    def recovery_bound_s(self) -> float:
        """One cycle plus 2 s: the issue's bound on recovery after the last fault."""
        return float(self.interval_seconds + 2)

    def recovery_bound_with(self, poison_ahead: int) -> float:
        """`recovery_bound_s` plus the failure policy's retries of ``poison_ahead`` poison
        batches that one partition must still pass through in order after the last fault.

        Those retries are the CR's policy at work, not the balancer: each batch is tried
        `chaoswatches.MAX_ATTEMPTS` times with the pods' backoff before it is dead-lettered,
        one after the other on its partition. A spec change makes every partition start again
        in the new location, where it meets again each poison event it had dead-lettered in
        the old one."""
        return self.recovery_bound_s + poison_ahead * chaoswatches.poison_retries_s()

    @property
    def apipause_s(self) -> float:
        return min(APIPAUSE_MAX_S, self.duration_s / 2)


# -- the faults


class Chaos:
    """Commits the faults against a started scenario, on the caller's thread."""

    def __init__(
        self,
        *,
        scenario: runs.ScenarioRun,
        system: operatorsystems.OursSystem,
        proxy: faultproxy.FaultProxy,
        watch: chaoswatches.CheckpointWatch,
        options: ChaosOptions,
    ) -> None:
        self.scenario = scenario
        self.system = system
        self.proxy = proxy
        self.watch = watch
        self.options = options
        self.rng = random.Random(options.seed)
        self.faults = dict.fromkeys(options.faults, 0)
        self._blob_faults_on = False
        self._resume_at: float | None = None
        self._hang_tickets = 0
        self._tried: set[str] = set()
        self.ledger = epochledgers.EpochLedger()
        #: Writes that fell out of the API server's write record unread (the audit missed them).
        self.unaudited = 0

    def local_api(self) -> LocalKubeAPI:
        """The local API, for the faults only it can commit (`LOCAL_API_ONLY`)."""
        kube = self.scenario.site.stack.kube
        if not isinstance(kube, LocalKubeAPI):
            raise errors.InvalidInput(
                "--faults", f"{', '.join(sorted(LOCAL_API_ONLY))} need --kube local"
            )
        return kube

    @property
    def kubelet(self) -> Any:
        assert self.scenario.kubelet is not None
        return self.scenario.kubelet

    def choices(self) -> list[str]:
        """The kinds that may come next: not used up, and not needing a paused API; the
        kinds not tried yet first (the API pause last of them), so that a run covers every
        kind it has time for."""
        paused = self._resume_at is not None
        allowed = [
            f
            for f in self.options.faults
            if not (f in ONCE and self.faults[f]) and not (paused and f in NEED_API)
        ]
        pending = [f for f in allowed if f not in self._tried]
        if len(pending) > 1 and "apipause" in pending:
            pending.remove("apipause")  # the pause holds back the kinds that need the API
        return pending or allowed

    def act(self, fault: str, *, deadline: float) -> None:
        self._tried.add(fault)
        names = self.kubelet.names()
        logger.info("chaos: %s", fault)
        if fault == "kill" and names:
            self.kubelet.kill(self.rng.choice(names))
        elif fault == "delete" and names:
            self.kubelet.delete(self.rng.choice(names))
            self.kubelet.create()
        elif fault == "operator":
            self.system.stop_operator()
            self.system.start_operator()
        elif fault == "blob":
            if self._blob_faults_on:
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
            self._blob_faults_on = not self._blob_faults_on
        elif fault == "amqp":
            self.scenario.site.stack.eventhubs.disconnect_all()
        elif fault == "poison":
            assert self.scenario.producer is not None
            self.scenario.producer.poison(self.rng.choice(self.scenario.site.partitions()))
        elif fault == "hang":
            self._hang_tickets += 1
            ticket = (
                self.scenario.site.record_dir / f"{chaoshandlers.HANG_TICKET}{self._hang_tickets}"
            )
            ticket.touch()
        elif fault == "apipause":
            pause_s = min(self.options.apipause_s, max(0.0, deadline - time.monotonic()))
            self.local_api().pause(exempt_tokens=[runs.KUBELET_TOKEN])
            self._resume_at = time.monotonic() + pause_s
            logger.info("chaos: the Kubernetes API is paused for %.1f s", pause_s)
        elif fault == "midfence":
            if not self.midfence(names):
                return
        elif fault == "specchange":
            self.change_container()
        elif fault == "watchlag":
            if not self.lag_watches(deadline=deadline):
                return
        elif fault == "watchstall":
            stall_s = min(WATCHSTALL_S, deadline - time.monotonic())
            if stall_s < 1.0:
                return
            self.local_api().inject_watch_fault("stall", seconds=stall_s, plural="pods")
            logger.info("chaos: the pod watches are silent for %.1f s", stall_s)
        elif fault == "relist":
            kube = self.local_api()
            kube.inject_watch_fault("close", seconds=RELIST_S, close_after_s=RELIST_STREAM_S)
            kube.inject_watch_fault("gone", seconds=RELIST_S)
        self.faults[fault] += 1

    def lag_watches(self, *, deadline: float) -> bool:
        """Delay the CR and ConfigMap watches until the faults stop; False with no time left."""
        window = min(WATCHLAG_MAX_S, deadline - time.monotonic())
        if window < 1.0:
            return False
        kube = self.local_api()
        for plural in WATCHLAG_PLURALS:
            kube.inject_watch_fault("lag", seconds=window, plural=plural, lag_s=WATCHLAG_S)
        logger.info(
            "chaos: the %s watches lag %g s for %.1f s",
            "/".join(WATCHLAG_PLURALS),
            WATCHLAG_S,
            window,
        )
        return True

    def audit(self) -> None:
        """Feed the epoch ledger the writes the API server committed since the last call."""
        taken = self.scenario.site.stack.kube.take_writes()
        self.unaudited += taken.dropped
        self.ledger.feed(epochledgers.Write(type=e.type, body=e.body) for e in taken.events)

    def midfence(self, names: list[str]) -> bool:
        """Catch the next fence's lease and SIGKILL its pod; False when none came in time."""
        if not names:
            return False
        faults = self.proxy.faults
        faults.arm_lease_trap()
        try:
            # A replacement makes the operator move partitions, so fences follow.
            self.kubelet.delete(self.rng.choice(names))
            self.kubelet.create()
            deadline = time.monotonic() + MIDFENCE_WAIT_S
            while (path := faults.lease_trapped()) is None and time.monotonic() < deadline:
                time.sleep(runs.POLL_S / 5)
                self.scenario.observe()
            if path is None:
                logger.info("chaos: midfence: no fence came within %g s", MIDFENCE_WAIT_S)
                return False
            partition = path.rstrip("/").rsplit("/", 1)[-1]
            pod = self.assignee(partition)
            if pod is None or pod not in self.kubelet.names():
                logger.info("chaos: midfence: partition %s has no live assignee", partition)
                return False
            logger.info("chaos: midfence: SIGKILL %s fencing partition %s", pod, partition)
            self.kubelet.kill(pod)
            return True
        finally:
            faults.release_lease_trap()

    def assignee(self, partition: str) -> str | None:
        """The pod whose ConfigMap assigns ``partition`` (owned), read from the store."""
        site = self.scenario.site
        for cm in site.stack.kube.list_objects(
            "v1/configmaps", namespace=site.namespace, label_selector=configmaps.LABEL_POD
        ):
            parsed = podassignments.parse_data(cm.get("data") or {})
            if parsed.consumer != site.consumer:
                continue
            for p, entry in parsed.partitions.items():
                if str(p) == partition and entry.state == "owned":
                    return parsed.pod
        return None

    def change_container(self) -> None:
        site = self.scenario.site
        name = f"{site.container}-b"
        site.loop.run(systems.ensure_container(site.stack.blob_connection_string, name))
        self.watch.follow(name)
        site.stack.kube.patch_object(
            systems.CR,
            site.consumer,
            {"spec": {"checkpointStore": {"containerName": name}}},
            namespace=site.namespace,
        )
        logger.info("chaos: checkpoint container %s -> %s", site.container, name)

    def resume_if_due(self, *, force: bool = False) -> None:
        if self._resume_at is not None and (force or time.monotonic() >= self._resume_at):
            self.local_api().resume()
            self._resume_at = None
            logger.info("chaos: the Kubernetes API answers again")

    def run_faults(self, duration_s: float) -> None:
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            self.resume_if_due()
            choices = self.choices()
            if choices:
                self.act(self.rng.choice(choices), deadline=deadline)
            wait = self.rng.uniform(*self.options.gap_s)
            until = min(deadline, time.monotonic() + wait)
            while time.monotonic() < until:
                time.sleep(runs.POLL_S)
                self.resume_if_due()
                self.scenario.observe()
                self.audit()

    def hang_ends(self) -> float:
        """When the last hang that began ends (monotonic; 0 without one): a hanging
        handler's partition cannot progress before, so the fault lasts until then."""
        began = chaoshandlers.hangs_began(self.scenario.site.record_dir)
        if not began:
            return 0.0
        offset = time.time() - time.monotonic()
        return max(began) + HANG_SECONDS - offset

    def stop_faults(self) -> None:
        chaoshandlers.cancel_hangs(self.scenario.site.record_dir)
        self.resume_if_due(force=True)
        kube = self.scenario.site.stack.kube
        if isinstance(kube, LocalKubeAPI):
            kube.clear_watch_faults()
        self.proxy.faults.clear()
        self._blob_faults_on = False
        if self.system.operator is None:
            self.system.start_operator()
        self.kubelet.scale(self.options.pods)
