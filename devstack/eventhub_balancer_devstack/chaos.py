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
  the operator something to assign. A fence takes a lease only when its first, unleased,
  write is refused, so the proxy refuses it, as a race would;
- ``specchange``: the CR's checkpoint container changes, once per run: every partition must
  move to the new location by ordered hand-off; the invariants follow the new location;
- ``watchlag``: the watches of the EventHubConsumers and of the ConfigMaps deliver every
  event `WATCHLAG_S` late (far longer than the 5 s after which the operator stops waiting
  for the echo of its own writes and reads afresh) while writes succeed at once, once per
  run, until the faults stop (at most `WATCHLAG_MAX_S`); a run needs ``--seconds`` well
  above `WATCHLAG_S` for the lag to show in full;
- ``relist``: every watch stream ends and its resume gets 410 Gone for `RELIST_S`, so that
  every watching client (kopf in the operator, the pods) lists again;
- ``watchstall``: the pod watches go silent (open, no events, no bookmarks) for
  `WATCHSTALL_S`, longer than the operator's 10 s watch inactivity timeout (and kopf's own
  default of 70 s), once per run and never past the
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
  one cycle plus 2 s, plus the failure policy's retries of the poison batches one partition
  has still to pass through then (``recovery_bound_s``, `ChaosOptions.recovery_bound_with`).
  The run waits up to `RECOVERY_TIMEOUT_S` so that a slow machine still measures how long
  recovery took instead of reporting that it never came.

The checkpoints are sampled directly from Azurite (not through the proxy) every
``SAMPLE_S``; a regression that is written and overwritten within one sample is not seen.
"""

from __future__ import annotations

import logging
import time
from typing import TypedDict

from eventhub_balancer import runners
from eventhub_balancer_devstack import (
    azurite,
    chaosfaults,
    chaoshandlers,
    chaoswatches,
    faultproxy,
)
from eventhub_balancer_devstack.kube import LocalKubeAPI
from eventhub_balancer_devstack.scenarios import operatorsystems, runs, systems
from eventhub_balancer_devstack.stacks import LocalStack

logger = logging.getLogger(__name__)

#: How often the checkpoint blobs are read for the invariants.
SAMPLE_S = chaoswatches.SAMPLE_S
#: The longest wait for recovery after the faults stop. Far above the strict bound
#: (``ChaosOptions.recovery_bound_s``, what the report's ``ok`` checks) so that a slow machine
#: still measures how long recovery took instead of reporting that it never came.
RECOVERY_TIMEOUT_S = 60.0


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
    #: The most poison batches one partition had still to pass through when the last fault
    #: ended (`chaoswatches.poison_ahead`); each adds the failure policy's retries to the bound.
    poison_batches_ahead: int
    #: One cycle plus 2 s, plus `chaoswatches.poison_retries_s` for each poison batch ahead.
    recovery_bound_s: float
    #: Why ``ok`` is false (empty when it is true).
    problems: list[str]
    ok: bool


def _partition_key(partition: str) -> tuple[int, str]:
    return (int(partition), partition) if partition.isdigit() else (1 << 30, partition)


def _elapsed(since: float) -> float:
    return round(time.monotonic() - since, 3)


def _poison_ahead(
    loop: runners.BackgroundLoop,
    stack: LocalStack,
    scenario: runs.ScenarioRun,
    container: str,
    hub: str,
) -> int:
    """`chaoswatches.poison_ahead` now, read from Azurite directly (not through the proxy);
    0 (the strict bound) when the dead-letter blobs cannot be listed."""
    poisoned = dict(scenario.producer.poisoned) if scenario.producer is not None else {}
    if not poisoned:
        return 0
    try:
        dead = loop.run(
            chaoswatches.deadletter_batches(
                connection_string=stack.blob_connection_string,
                container=container,
                prefix=chaoswatches.deadletter_prefix(
                    hub=hub, consumer_group=systems.CONSUMER_GROUP
                ),
            )
        )
    except Exception:
        logger.warning("chaos: the dead-letter blobs cannot be listed", exc_info=True)
        return 0
    return chaoswatches.poison_ahead(poisoned, dead)


def run(options: chaosfaults.ChaosOptions, *, observer: runs.Observer) -> ChaosReport:
    hub = "chaos"
    with (
        runs.local_stack(
            hubs={hub: options.partitions}, work_dir=options.work_dir, kube_kind=options.kube
        ) as (
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
        system = operatorsystems.OursSystem(
            site,
            pod_grace_seconds=options.pod_grace_seconds,
            handoff_timeout_seconds=options.handoff_timeout_seconds,
            handler=f"{chaoshandlers.__name__}:process",
            consume_args=("--stuck-seconds", str(chaosfaults.STUCK_SECONDS)),
            env={chaoshandlers.ENV_HANG_SECONDS: str(chaosfaults.HANG_SECONDS)},
            processing={"maxAttempts": chaoswatches.MAX_ATTEMPTS, "onFailure": "deadLetter"},
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
        watch = chaoswatches.CheckpointWatch(site=site)
        chaos = chaosfaults.Chaos(
            scenario=scenario, system=system, proxy=proxy, watch=watch, options=options
        )
        # Before the operator starts: the epoch audit must see every assignment.
        stack.kube.record_writes("v1/configmaps", systems.CR)
        scenario.start()
        ready_s = balanced_s = recovered_s = after_faults_s = None
        last_fault_ended = 0.0
        ahead = 0
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
                    ahead = _poison_ahead(loop, stack, scenario, watch.current, hub)
                snapshot = scenario.observe()
                if ready_s is not None and balanced_s is None and snapshot.balanced:
                    balanced_s = round(_elapsed(ended) - ready_s, 3)
                if (
                    ready_s is not None
                    and snapshot.balanced
                    and chaoswatches.progressing(
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
                lambda produced: chaoswatches.progressing(
                    {p: n - 1 for p, n in produced.items()},
                    checkpoints=watch.positions(),
                    processed=scenario.tally.highest,
                )
            )
            watch.stop(loop)
            chaos.audit()
            watch_effects = (
                stack.kube.watch_fault_effects() if isinstance(stack.kube, LocalKubeAPI) else {}
            )
            # After a spec change, every partition's checkpoint must be in the new location.
            unmoved = (
                sorted(set(site.partitions()) - set(watch.positions()), key=_partition_key)
                if len(watch.containers) > 1
                else []
            )
            dead, unreadable = loop.run(
                chaoswatches.read_deadletters(
                    connection_string=stack.blob_connection_string,
                    containers=watch.containers,
                    prefix=chaoswatches.deadletter_prefix(
                        hub=hub, consumer_group=systems.CONSUMER_GROUP
                    ),
                )
            )
        finally:
            chaos.resume_if_due(force=True)
            scenario.stop()
        summary = scenario.summary()
        produced = scenario.produced_by_partition()
        lost = chaoswatches.account(scenario.tally.missing(produced), dead)
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
    bound = options.recovery_bound_with(ahead)
    if recovered_s is None:
        problems.append(f"not recovered within {RECOVERY_TIMEOUT_S:g} s")
    elif recovered_s > bound:
        problems.append(f"recovered in {recovered_s} s > {bound} s")
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
        "poison_batches_ahead": ahead,
        "recovery_bound_s": bound,
        "problems": problems,
        "ok": not problems,
    }
