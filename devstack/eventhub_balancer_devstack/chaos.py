"""A chaos run: the operator and consumer pods under load while things keep breaking.

For a bounded time, at random (seeded) moments, it commits faults of the kinds selected
(`FAULTS`, all by default):

- ``kill``: SIGKILL a consumer pod's process (it restarts, as with restartPolicy Always);
- ``delete``: delete a pod and start a replacement;
- ``operator``: restart the operator;
- ``blob``: toggle Blob Storage faults through the fault proxy in front of Azurite (5xx,
  dropped requests, delays, 412 bursts);
- ``amqp``: drop every Event Hubs connection at once;
- ``poison``: the producer marks one event of a random partition as poison; the pods' handler
  (`chaoshandlers`) raises on it every time, and the CR's failure policy
  (``spec.processing``: a few attempts, then dead-letter) must contain it to its partition;
- ``hang``: one handler call somewhere sleeps beyond the pods' ``--stuck-seconds``;
- ``apipause``: the Kubernetes API stops answering (requests hang, watches drop) for
  ``min(APIPAUSE_MAX_S, duration / 2, the time left)``, once per run; the pods must keep
  consuming (the local kubelet is spared, as a node would be);
- ``midfence``: a pod is SIGKILLed right after it took a checkpoint blob's lease to fence a
  partition newly assigned to it (the fault proxy holds the answer to its lease request
  meanwhile), so that the lease stays held for its full duration; a pod replacement gives
  the operator something to assign;
- ``specchange``: the CR's checkpoint container changes, once per run: every partition must
  move to the new location by ordered hand-off; the invariants follow the new location;
- ``watchlag``: the watches of the EventHubConsumers and of the ConfigMaps deliver every
  event `WATCHLAG_S` late (longer than the 60 s after which the operator gives up waiting for
  the echo of its own writes) while writes succeed at once, once per run, until the faults
  stop (at most `WATCHLAG_MAX_S`); a run needs ``--seconds`` well above `WATCHLAG_S` for the
  lag to show in full;
- ``relist``: every watch stream ends and its resume gets 410 Gone for `RELIST_S`, so that
  every watching client (kopf in the operator, the pods) lists again;
- ``watchstall``: the pod watches go silent (open, no events, no bookmarks) for
  `WATCHSTALL_S`, longer than kopf's 70 s inactivity timeout, once per run and never past the
  faults' end; pods that come and go meanwhile are seen only through other means.

Faults that put the control plane away (``apipause``) make the run skip the faults that need
it (``operator``, ``midfence``) until it is back.

The invariants are checked throughout and at the end:

- no event lost: every event the emulator holds was processed, or dead-lettered (a JSON blob
  under ``<fqns>/<hub>/<group>/deadletter/`` in a checkpoint container, listing its
  ``events`` with ``partition`` and ``sequenceNumber``);
- no checkpoint regression: a partition's checkpoint sequence number never goes back
  (per location);
- after a spec change, every partition has its checkpoint in the new location;
- never two accepted writers for one partition: the checkpoint's epoch never goes back and
  one epoch belongs to one owner (checkpoint writes are owner-checked with If-Match, so a
  fenced-out writer that got through would show as either);
- epochs: no (partition, epoch) is given, as owned, to two different pods, and
  ``status.epochs`` never goes down (`epochledgers`, counted from the API server's record of
  every committed ConfigMap and EventHubConsumer write, not from a watch);
- recovery: from the end of the last fault (for a pod that was killed, deleted or restarted:
  once every pod is Ready again, since a process's start-up is the kubelet's and the
  machine's, not the balancer's; for a hang: once the hanging call returns;
  ``recovered_after_faults_s`` includes both), the system is
  balanced again with every partition progressing (its checkpoint, in the current location,
  at or past the last event produced before that moment, or that event processed) within
  one cycle plus 2 s
  (``recovery_bound_s``). The run waits up to `RECOVERY_TIMEOUT_S` so that a slow machine
  still measures how long recovery took instead of reporting that it never came.

The checkpoints are sampled directly from Azurite (not through the proxy) every
``SAMPLE_S``; a regression that is written and overwritten within one sample is not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypedDict

from eventhub_balancer import errors, runners
from eventhub_balancer.adapters import blobs, checkpointing
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack import azurite, chaoshandlers, epochledgers, faultproxy
from eventhub_balancer_devstack.scenarios import runs, systems

logger = logging.getLogger(__name__)

#: How often the checkpoint blobs are read for the invariants.
SAMPLE_S = 0.2
#: The longest wait for recovery after the faults stop. Far above the strict bound
#: (``ChaosOptions.recovery_bound_s``, what the report's ``ok`` checks) so that a slow machine
#: still measures how long recovery took instead of reporting that it never came.
RECOVERY_TIMEOUT_S = 60.0
#: The longest outage of the Kubernetes API; a run also never pauses for more than half of
#: its fault time, nor beyond its end.
APIPAUSE_MAX_S = 60.0
#: The longest wait for a fence to catch after a ``midfence`` fault armed the lease trap.
MIDFENCE_WAIT_S = 10.0
#: The pods' ``--stuck-seconds``, and how long a ``hang`` fault's handler call sleeps.
STUCK_SECONDS = 3.0
HANG_SECONDS = STUCK_SECONDS + 2.0
#: How late a ``watchlag`` fault delivers watch events: above the operator's 60 s wait for
#: the echo of its own writes, as in the failure that issue 24 of this project replays.
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
#: How long a ``watchstall`` fault keeps the pod watches silent: beyond kopf's 70 s
#: inactivity timeout, so that kopf's reconnection meets the same silence.
WATCHSTALL_S = 80.0
#: The failure policy of the chaos run's CR: a poison batch is dead-lettered after this many
#: attempts.
MAX_ATTEMPTS = 3

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


def parse_faults(text: str) -> tuple[str, ...]:
    """``--faults kill,poison`` -> the kinds, in `FAULTS` order; ``all`` (or empty) is all."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or names == ["all"]:
        return FAULTS
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

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise errors.InvalidInput("--seconds", f"{self.duration_s} is not above 0")
        if not self.faults:
            raise errors.InvalidInput("--faults", f"name at least one of {', '.join(FAULTS)}")
        parse_faults(",".join(self.faults))

    @property
    def recovery_bound_s(self) -> float:
        """One cycle plus 2 s: the issue's bound on recovery after the last fault."""
        return float(self.interval_seconds + 2)

    @property
    def apipause_s(self) -> float:
        return min(APIPAUSE_MAX_S, self.duration_s / 2)


class ChaosReport(TypedDict):
    seed: int
    duration_s: float
    fault_kinds: list[str]
    #: Faults committed, per kind.
    faults: dict[str, int]
    produced: int
    processed: int
    dead_lettered: int
    lost: int
    duplicates: int
    checkpoint_regressions: list[str]
    writer_conflicts: list[str]
    checkpoint_samples: int
    ready_after_faults_s: float | None
    balanced_after_ready_s: float | None
    #: From the end of the last fault (a killed, deleted or restarted pod's fault ends once
    #: its process is up and Ready again, a hang once the hanging call returns) until
    #: balanced with every partition progressing.
    recovered_s: float | None
    #: The same from the moment the faults stopped, the pods' own start-up included.
    recovered_after_faults_s: float | None
    #: (partition, epoch) pairs given, as owned, to two different pods (`epochledgers`).
    epoch_reuse: int
    #: Committed status writes with a partition's epoch below one committed before.
    epochs_decreased: int
    #: The committed ConfigMap and status writes the epoch audit read.
    epoch_writes_audited: int
    #: The first few epoch findings, in words.
    epoch_findings: list[str]
    #: What the watch faults did on the API server: ``delayed`` events, ``expired`` resumes
    #: (410), streams ``closed`` early (empty without watch faults).
    watch_fault_effects: dict[str, int]
    recovery_bound_s: float
    #: Why ``ok`` is false (empty when it is true).
    problems: list[str]
    ok: bool


# -- dead letters


def deadletter_prefix(*, hub: str, consumer_group: str) -> str:
    """Where a pod dead-letters batches, next to the checkpoints (lower-cased, as they are)."""
    return f"{systems.FULLY_QUALIFIED_NAMESPACE}/{hub}/{consumer_group}/deadletter/".lower()


def parse_deadletter(data: bytes) -> list[tuple[str, int]]:
    """The ``(partition, sequence number)`` of each event in a dead-letter blob.

    Raises ValueError when the blob is not JSON with an ``events`` list of objects with a
    ``partition`` and an integer ``sequenceNumber``.
    """
    body = json.loads(data)
    events = body.get("events") if isinstance(body, dict) else None
    if not isinstance(events, list):
        raise ValueError("no 'events' list")
    result = []
    for event in events:
        if not isinstance(event, dict):
            raise ValueError(f"an event is not an object: {event!r:.80}")
        partition, sequence = event.get("partition"), event.get("sequenceNumber")
        if partition is None or isinstance(sequence, bool) or not isinstance(sequence, int):
            raise ValueError(f"an event without partition and sequenceNumber: {event!r:.80}")
        result.append((str(partition), sequence))
    return result


def account(
    missing: Iterable[tuple[str, int]], dead_lettered: Iterable[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The events still lost once the dead-lettered ones count as accounted for."""
    accounted = set(dead_lettered)
    return [event for event in missing if event not in accounted]


def progressing(
    targets: Mapping[str, int],
    *,
    checkpoints: Mapping[str, int],
    processed: Mapping[str, int],
) -> bool:
    """Every partition took up its work again: its checkpoint (sequence number) or the
    highest sequence number processed is at or past ``targets[partition]`` (the last event
    produced before the faults ended; -1 when there was none)."""
    return all(
        target < 0 or max(checkpoints.get(p, -1), processed.get(p, -1)) >= target
        for p, target in targets.items()
    )


# -- the checkpoint watch


class CheckpointWatch:
    """Samples every checkpoint blob of every location the run used, on the scenario's loop,
    and keeps the violations. `follow` adds a location (after a spec change)."""

    def __init__(self, *, site: systems.Site) -> None:
        self.site = site
        self.regressions: list[str] = []
        self.conflicts: list[str] = []
        self.samples = 0
        self.containers = [site.container]
        #: (container, partition) -> (sequence number, epoch, owner) last seen.
        self.last: dict[tuple[str, str], tuple[int, int, str]] = {}
        self._owners: dict[tuple[str, str, int], str] = {}
        self._stop = asyncio.Event()
        self._done: Any = None

    @property
    def current(self) -> str:
        return self.containers[-1]

    def follow(self, container: str) -> None:
        self.containers = [*self.containers, container]

    def positions(self) -> dict[str, int]:
        """partition -> checkpoint sequence number in the current location."""
        current = self.current
        return {p: last[0] for (c, p), last in self.last.items() if c == current}

    def start(self, loop: runners.BackgroundLoop) -> None:
        self._done = loop.submit(self._run())

    def stop(self, loop: runners.BackgroundLoop) -> None:
        loop.call_soon(self._stop.set)
        done = self._done
        if done is not None:
            with contextlib.suppress(Exception):
                done.result(timeout=10)

    def check(self, checkpoints: list[checkpointing.Checkpoint], *, container: str = "") -> None:
        container = container or self.site.container
        for cp in checkpoints:
            where = f"{container}: partition {cp.partition}"
            before = self.last.get((container, cp.partition))
            if before is not None:
                sequence, epoch, owner = before
                if cp.sequence_number < sequence:
                    self.regressions.append(f"{where}: sequence {sequence} -> {cp.sequence_number}")
                if cp.epoch < epoch:
                    self.conflicts.append(
                        f"{where}: epoch {epoch} ({owner}) -> {cp.epoch} ({cp.owner_id})"
                    )
            known = self._owners.setdefault((container, cp.partition, cp.epoch), cp.owner_id)
            if known != cp.owner_id:
                self.conflicts.append(
                    f"{where}: epoch {cp.epoch} written by {known} and {cp.owner_id}"
                )
            self.last[(container, cp.partition)] = (cp.sequence_number, cp.epoch, cp.owner_id)

    async def _run(self) -> None:
        stores: dict[str, checkpointing.CheckpointStore] = {}
        async with contextlib.AsyncExitStack() as opened:
            while not self._stop.is_set():
                for container in list(self.containers):
                    try:
                        if container not in stores:
                            stores[container] = await self._open(opened, container)
                        checkpoints = await stores[container].list()
                    except Exception as e:  # Azurite itself is never faulted; log and go on
                        logger.warning("checkpoint sample of %s failed: %s", container, e)
                        continue
                    self.check(checkpoints, container=container)
                self.samples += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=SAMPLE_S)

    async def _open(
        self, opened: contextlib.AsyncExitStack, container_name: str
    ) -> checkpointing.CheckpointStore:
        container = await opened.enter_async_context(
            blobs.open_container(
                container_name=container_name,
                connection_string=self.site.stack.blob_connection_string,
            )
        )
        return checkpointing.CheckpointStore(
            container,
            fully_qualified_namespace=systems.FULLY_QUALIFIED_NAMESPACE,
            eventhub_name=self.site.hub,
            consumer_group=systems.CONSUMER_GROUP,
            owner_id="chaos-watch",
        )


async def read_deadletters(
    *, connection_string: str, containers: Iterable[str], prefix: str
) -> tuple[list[tuple[str, int]], list[str]]:
    """Every dead-lettered event in ``containers`` under ``prefix``, and the unreadable blobs."""
    events: list[tuple[str, int]] = []
    unreadable: list[str] = []
    for name in containers:
        async with blobs.open_container(
            container_name=name, connection_string=connection_string
        ) as container:
            async for item in container.list_blobs(name_starts_with=prefix):
                data = await (await container.download_blob(item.name)).readall()
                try:
                    events.extend(parse_deadletter(data))
                except ValueError as e:
                    unreadable.append(f"{name}/{item.name}: {e}")
    return events, unreadable


# -- the faults


class Chaos:
    """Commits the faults against a started scenario, on the caller's thread."""

    def __init__(
        self,
        *,
        scenario: runs.ScenarioRun,
        system: systems.OursSystem,
        proxy: faultproxy.FaultProxy,
        watch: CheckpointWatch,
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
            self.scenario.site.stack.kube.pause(exempt_tokens=[runs.KUBELET_TOKEN])
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
            self.scenario.site.stack.kube.inject_watch_fault(
                "stall", seconds=stall_s, plural="pods"
            )
            logger.info("chaos: the pod watches are silent for %.1f s", stall_s)
        elif fault == "relist":
            kube = self.scenario.site.stack.kube
            kube.inject_watch_fault("close", seconds=RELIST_S, close_after_s=RELIST_STREAM_S)
            kube.inject_watch_fault("gone", seconds=RELIST_S)
        self.faults[fault] += 1

    def lag_watches(self, *, deadline: float) -> bool:
        """Delay the CR and ConfigMap watches until the faults stop; False with no time left."""
        window = min(WATCHLAG_MAX_S, deadline - time.monotonic())
        if window < 1.0:
            return False
        kube = self.scenario.site.stack.kube
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
            parsed = configmaps.parse_data(cm.get("data") or {})
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
            self.scenario.site.stack.kube.resume()
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
        self.scenario.site.stack.kube.clear_watch_faults()
        self.proxy.faults.clear()
        self._blob_faults_on = False
        if self.system.operator is None:
            self.system.start_operator()
        self.kubelet.scale(self.options.pods)


def _partition_key(partition: str) -> tuple[int, str]:
    return (int(partition), partition) if partition.isdigit() else (1 << 30, partition)


def _elapsed(since: float) -> float:
    return round(time.monotonic() - since, 3)


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
            handler=f"{chaoshandlers.__name__}:process",
            consume_args=("--stuck-seconds", str(STUCK_SECONDS)),
            env={chaoshandlers.ENV_HANG_SECONDS: str(HANG_SECONDS)},
            processing={"maxAttempts": MAX_ATTEMPTS, "onFailure": "deadLetter"},
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
        chaos = Chaos(scenario=scenario, system=system, proxy=proxy, watch=watch, options=options)
        # Before the operator starts: the epoch audit must see every assignment.
        stack.kube.record_writes("v1/configmaps", systems.CR)
        scenario.start()
        ready_s = balanced_s = recovered_s = after_faults_s = None
        last_fault_ended = 0.0
        try:
            watch.start(loop)
            scenario.results.append(scenario.perform(scenario.steps[0]))
            try:
                chaos.run_faults(options.duration_s)
            finally:
                chaos.stop_faults()
            ended = time.monotonic()
            hang_ends = chaos.hang_ends()
            targets = {p: n - 1 for p, n in scenario.produced_by_partition().items()}
            deadline = ended + RECOVERY_TIMEOUT_S
            while time.monotonic() < deadline:
                names, ready = scenario.members()
                if ready_s is None and len(names) == len(ready) == options.pods:
                    ready_s = _elapsed(ended)
                    # The last fault ends when every pod is up again and no handler hangs.
                    last_fault_ended = max(time.monotonic(), hang_ends)
                snapshot = scenario.observe()
                if ready_s is not None and balanced_s is None and snapshot.balanced:
                    balanced_s = round(_elapsed(ended) - ready_s, 3)
                if (
                    ready_s is not None
                    and snapshot.balanced
                    and progressing(
                        targets, checkpoints=watch.positions(), processed=scenario.tally.highest
                    )
                ):
                    after_faults_s = _elapsed(ended)
                    recovered_s = max(0.0, _elapsed(last_fault_ended))
                    if balanced_s is None:
                        balanced_s = recovered_s
                    break
                time.sleep(runs.POLL_S)
                chaos.audit()
            scenario.drain(
                lambda produced: progressing(
                    {p: n - 1 for p, n in produced.items()},
                    checkpoints=watch.positions(),
                    processed=scenario.tally.highest,
                )
            )
            watch.stop(loop)
            chaos.audit()
            watch_effects = stack.kube.watch_fault_effects()
            # After a spec change, every partition's checkpoint must be in the new location.
            unmoved = (
                sorted(set(site.partitions()) - set(watch.positions()), key=_partition_key)
                if len(watch.containers) > 1
                else []
            )
            dead, unreadable = loop.run(
                read_deadletters(
                    connection_string=stack.blob_connection_string,
                    containers=watch.containers,
                    prefix=deadletter_prefix(hub=hub, consumer_group=systems.CONSUMER_GROUP),
                )
            )
        finally:
            chaos.resume_if_due(force=True)
            scenario.stop()
        summary = scenario.summary()
        produced = scenario.produced_by_partition()
        lost = account(scenario.tally.missing(produced), dead)
    dead_lettered = len(set(dead))
    problems = []
    if lost:
        problems.append(f"{len(lost)} events lost, e.g. {lost[:5]}")
    if watch.regressions:
        problems.append(f"{len(watch.regressions)} checkpoint regressions")
    if watch.conflicts:
        problems.append(f"{len(watch.conflicts)} writer conflicts")
    if watch.samples == 0:
        problems.append("no checkpoint sample")
    if unreadable:
        problems.append(f"unreadable dead-letter blobs: {unreadable[:3]}")
    if unmoved:
        problems.append(f"partitions without a checkpoint in {watch.current}: {unmoved}")
    ledger = chaos.ledger
    if ledger.epoch_reuse:
        problems.append(f"{ledger.epoch_reuse} (partition, epoch) pairs given to two pods")
    if ledger.epochs_decreased:
        problems.append(f"status.epochs went down {ledger.epochs_decreased} times")
    if chaos.unaudited:
        problems.append(f"{chaos.unaudited} writes fell out of the write record unaudited")
    if ledger.writes == 0:
        problems.append("no assignment or status write audited")
    if recovered_s is None:
        problems.append(f"not recovered within {RECOVERY_TIMEOUT_S:g} s")
    elif recovered_s > options.recovery_bound_s:
        problems.append(f"recovered in {recovered_s} s > {options.recovery_bound_s} s")
    return {
        "seed": options.seed,
        "duration_s": options.duration_s,
        "fault_kinds": list(options.faults),
        "faults": chaos.faults,
        "produced": summary["produced"],
        "processed": summary["processed"],
        "dead_lettered": dead_lettered,
        "lost": len(lost),
        "duplicates": summary["duplicates"],
        "checkpoint_regressions": watch.regressions,
        "writer_conflicts": watch.conflicts,
        "checkpoint_samples": watch.samples,
        "ready_after_faults_s": ready_s,
        "balanced_after_ready_s": balanced_s,
        "recovered_s": recovered_s,
        "recovered_after_faults_s": after_faults_s,
        "epoch_reuse": ledger.epoch_reuse,
        "epochs_decreased": ledger.epochs_decreased,
        "epoch_writes_audited": ledger.writes,
        "epoch_findings": ledger.examples,
        "watch_fault_effects": watch_effects,
        "recovery_bound_s": options.recovery_bound_s,
        "problems": problems,
        "ok": not problems,
    }
