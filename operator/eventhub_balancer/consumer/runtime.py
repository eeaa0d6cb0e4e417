"""The consumer pod's runtime: applies assignments, runs partition workers, acknowledges.

It follows the assignment source (the pod's ConfigMap), and for every change: releases the
partitions no longer owned (each worker finishes its batch and writes its final checkpoint, and
``released`` = {partition: epoch} is written), starts a worker per newly owned partition, and once
every owned partition is running (fenced), parked or reported, and nothing is left to release,
writes ``applied-generation``. A change of the coordinates (hub, namespace, consumer group,
checkpoint container or account, start position) releases every worker into the old store and
reopens the clients: a generation is never acknowledged while the pod reads other coordinates than
it names. A credential file's new connection string is swapped under the running workers instead
(`clients.Clients.renew`).

A partition in trouble (failing, parked, stuck, lost, failing to start) is reported with the
acknowledgement (`acknowledgements`). The pod is Ready once its current generation's partitions are
taken up or waited for long enough (`takeups`; a release still running is waited for through
``released``) and what it processes with is ready (Spark mode: `sessionkeeping`), and not while
shutting down. On SIGTERM it releases everything within a bounded time, acknowledges the releases
that finished and the failing partitions it does not run (never one it had to cancel), and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping

from eventhub_balancer import handoffs
from eventhub_balancer.consumer import (
    acknowledgements,
    assignments,
    clients,
    connections,
    crashmarkers,
    exits,
    loopclocks,
    loopstalls,
    metrics,
    partitions,
    processing,
    releasebudgets,
    restarts,
    secretfiles,
    shutdowns,
    takeups,
)
from eventhub_balancer.contracts import partitionreports, podassignments

logger = logging.getLogger(__name__)

#: The reconcile loop wakes at least this often (restarts, readiness, loop liveness); a
#: change of reports alone is written at most once per tick.
TICK_S = 0.5


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeSettings:
    consumer: str
    pod: str
    batch: partitions.BatchSettings = dataclasses.field(default_factory=partitions.BatchSettings)
    #: The longest graceful shutdown (keep it below the pod's terminationGracePeriodSeconds).
    shutdown_timeout: float = 25.0


class Runtime:
    """Runs one pod's partitions after its assignment source."""

    def __init__(
        self,
        *,
        settings: RuntimeSettings,
        source: assignments.AssignmentSource,
        backends: connections.BackendFactory,
        processor: processing.BatchProcessor,
        exit_process: Callable[[str], None] = exits.exit_now,
        trigger_stats: metrics.TriggerStats | None = None,
        readiness: Callable[[], tuple[bool, str]] | None = None,
        crash_markers: crashmarkers.CrashMarkers | None = None,
        secret_files: secretfiles.SecretFiles | None = None,
    ) -> None:
        """``readiness`` says whether what the handler needs besides the assignment is ready,
        and why not (Spark mode: `sessionkeeping.SessionKeeper.ready`). ``crash_markers``:
        where handler calls are noted for the pod's next process (None: nowhere).
        ``secret_files``: the credential files ``backends`` reads (None: none)."""
        self.settings = settings
        self.readiness = readiness
        self.source = source
        self.processor = processor
        self.crash_markers = crash_markers or crashmarkers.CrashMarkers(None, pod=settings.pod)
        #: Every partition this pod ever owned, kept for the life of the process (Prometheus
        #: counters never reset): bounded by the hub's partition count, as are the maps below.
        self.stats: dict[str, metrics.PartitionStats] = {}
        #: Spark mode's triggers (None in plain mode), for /metrics.
        self.trigger_stats = trigger_stats
        #: The partitions being processed now, one worker and task each.
        self.workers: dict[str, partitions.PartitionWorker] = {}
        self._tasks: dict[str, asyncio.Task[handoffs.Outcome]] = {}
        self.latest: assignments.Assignment | None = None
        #: The last generation whose partitions ran (Ready), and the last one also released.
        self.taken_generation: int | None = None
        self.applied_generation: int | None = None
        #: Since when the pod waits for a generation's take-up (readiness bounds the wait).
        self.take_up = takeups.TakeUp()
        self.release_budget = releasebudgets.ReleaseBudget(settings.batch)
        #: What the pod acknowledges as released, {partition: epoch}; gone at a newer epoch.
        self.released: dict[str, int] = {}
        #: Partitions lost at our own epoch: {partition: (epoch, error)}.
        self._lost: dict[str, tuple[int, str]] = {}
        #: The backoff of partitions whose worker failed, until one starts again.
        self.restarts = restarts.Restarts()
        #: Called with a reason when a handler outlives its release (tests inject a recorder).
        self.exit_process = exit_process
        #: Why the process was asked to exit (None: it was not).
        self.exit_reason: str | None = None
        #: What the pod last wrote back to its assignment source.
        self.acks = acknowledgements.Acknowledgements(source, min_interval=TICK_S)
        self._wake = asyncio.Event()
        self._shutdown = asyncio.Event()
        #: The open clients of the coordinates the pod reads.
        self.clients = clients.Clients(backends, files=secret_files)
        #: Loop time of the last loop pass (None: none yet): /healthz checks that the loop turns.
        self.heartbeat: float | None = None
        self.stopped = False
        #: The loop's stalls (an async handler that blocks, a paused process), said in the log.
        self.stalls = loopstalls.LoopStalls(async_handler=loopstalls.handler_is_async(processor))

    # -- what the endpoints ask

    def ready(self) -> tuple[bool, str]:
        """Ready: the current generation's partitions are taken up (running, parked or
        reported), or waited for longer than `takeups.ready_bound` of the grace it was
        given; not while the API server refuses to let it read its assignment. Neither a
        partition in trouble (reported) nor a release still running is a reason to be
        NotReady: past ``podGraceSeconds`` all the pod's partitions would move."""
        if self._shutdown.is_set():
            return False, "shutting down"
        unreadable = getattr(self.source, "unreadable", lambda: None)()
        if unreadable:  # its partitions may have moved: let the operator hand them on
            return False, str(unreadable)
        if self.latest is None:
            return False, "no assignment read yet"
        if self.readiness is not None:
            ready, reason = self.readiness()
            if not ready:
                return False, reason
        reports = self.reports()
        bound = takeups.ready_bound(self.latest.pod_grace_seconds)
        return takeups.of_generation(
            generation=self.latest.generation,
            taken=self.taken_generation,
            applied=self.applied_generation,
            overdue=self.take_up.overdue(loopclocks.now(), bound),
            bound=bound,
            untaken=acknowledgements.untaken(self._wanted(), self.workers, reports),
            releasing=[p for p, w in self.workers.items() if w.releasing],
            reports=reports,
        )

    def reports(self, now: float | None = None) -> dict[str, partitionreports.PartitionReport]:
        """The partitions of the current assignment that are not processing normally."""
        current = None if self.latest is None else connections.Coordinates.of(self.latest)
        return acknowledgements.collect_reports(
            wanted=self._wanted(),
            workers=self.workers,
            lost=self._lost,
            restarts=self.restarts.entries,
            unopened=self.clients.unopened(current),
            credentials=self.clients.problem(),
            now=loopclocks.now() if now is None else now,
        )

    def heartbeat_age(self) -> float:
        """Seconds since the reconcile loop last turned (0 before its first turn)."""
        return 0.0 if self.heartbeat is None else loopclocks.now() - self.heartbeat

    def owned(self) -> dict[str, int]:
        return {p: w.epoch for p, w in self.workers.items() if not w.releasing}

    # -- control

    def request_shutdown(self) -> None:
        """Release everything and stop (SIGTERM)."""
        if not self._shutdown.is_set():
            logger.info("shutdown requested: releasing %d partitions", len(self.workers))
            self._shutdown.set()
            self._wake.set()

    async def run(self) -> None:
        """Until shutdown is requested (or the source ends): then release and return."""
        feeder = asyncio.create_task(self._follow_source(), name="assignments")
        try:
            while not self._shutdown.is_set():
                self.heartbeat = loopclocks.now()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=TICK_S)
                self.stalls.waited(self.heartbeat, TICK_S, loopclocks.now())
                self._wake.clear()
                if feeder.done():
                    feeder.result()  # a broken watch ends the runtime with its error
                    logger.info("the assignment source ended")
                    break
                if self._shutdown.is_set():
                    break
                await self._reconcile()
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
            try:
                await self._drain()
            finally:
                await self.clients.close()
                self.stopped = True

    async def _follow_source(self) -> None:
        async for assignment in self.source.updates():
            logger.info(
                "assignment generation %d: %s",
                assignment.generation,
                podassignments.described(assignment.partitions),
            )
            self.latest = assignment
            self.release_budget.read(assignment.handoff_timeout_seconds)
            self.take_up.read(
                assignment.generation, taken=self.taken_generation, now=loopclocks.now()
            )
            self._wake.set()

    # -- reconciling

    def _wanted(self) -> dict[str, int]:
        entries = self.latest.partitions.items() if self.latest is not None else ()
        return {p: e.epoch for p, e in entries if e.state == "owned"}

    async def _reconcile(self) -> None:
        assignment = self.latest
        if assignment is None:
            return
        wanted = self._wanted()
        key = connections.Coordinates.of(assignment)
        if await self.clients.renew(key, self.workers.values()):
            self.restarts.clear()  # partitions failing with the old key start at once
        moving = self.clients.moving(key)
        for partition, worker in self.workers.items():
            worker.batches.processing_policy = assignment.processing
            worker.check_stuck()  # /metrics and the log: while the call hangs, not after
            if (moving or wanted.get(partition) != worker.epoch) and not worker.releasing:
                why = f" ({moving})" if moving else ""
                logger.info("partition %s: releasing epoch %d%s", partition, worker.epoch, why)
                worker.release()
        if moving and not self.workers:
            logger.info("every partition released from %s (%s)", self.clients.key, moving)
            await self.clients.close()
            # What was lost or failing there says nothing about the new coordinates.
            self._lost.clear()
            self.restarts.clear()
            moving = None
        if wanted and not moving:
            backend = await self.clients.get(assignment, key)
            if backend is not None:
                self._start_workers(wanted, backend, assignment)
        self.released.update(acknowledgements.released_unrun(assignment, self.workers.keys()))
        for partition in list(self.released):
            if partition in wanted and wanted[partition] > self.released[partition]:
                del self.released[partition]  # ours again, with a newer epoch
        reports = self.reports()
        if self._applied(wanted, key, reports):
            self.taken_generation = assignment.generation
            self.take_up.done()
            if all(wanted.get(p) == w.epoch and not w.releasing for p, w in self.workers.items()):
                self.applied_generation = assignment.generation
        await self._acknowledge(reports)

    def _applied(
        self,
        wanted: Mapping[str, int],
        key: connections.Coordinates,
        reports: Mapping[str, partitionreports.PartitionReport],
    ) -> bool:
        """Every wanted partition is taken up (`acknowledgements.taken_up`) and the pod reads
        the assignment's coordinates."""
        reading = not wanted or self.clients.reading(key)
        return reading and acknowledgements.taken_up(wanted, self.workers, reports)

    def _start_workers(
        self,
        wanted: Mapping[str, int],
        backend: connections.Backend,
        assignment: assignments.Assignment,
    ) -> None:
        now = loopclocks.now()
        for partition, epoch in wanted.items():
            if partition in self.workers:
                continue  # running, or an older epoch still releasing: start after it ends
            lost = self._lost.get(partition)
            if lost is not None and lost[0] >= epoch:
                continue  # a newer owner holds this epoch's partition: wait for a new epoch
            if not self.restarts.due(partition, now=now):
                continue
            stats = self.stats.setdefault(partition, metrics.PartitionStats())
            stats.owned = True
            worker = partitions.PartitionWorker(
                partition=partition,
                epoch=epoch,
                consumer=self.settings.consumer,
                pod=self.settings.pod,
                store=backend.store,
                open_receiver=backend.open_receiver,
                resolve_start=backend.resolve_start,
                check_position=backend.check_position,
                processor=self.processor,
                settings=self.settings.batch,
                stats=stats,
                # Acknowledge the generation as soon as the last partition is fenced, not at
                # the next tick: the operator and the pod's readiness wait for it.
                on_fenced=self._wake.set,
                processing_policy=assignment.processing,
                dead_letters=backend.dead_letters,
                on_hung=self._hung,
                marks=self.crash_markers.partition(
                    partition, epoch, connections.Coordinates.of(assignment)
                ),
                take_up_level=self.restarts.take_up_level(partition, now=now),
            )
            if self.released.get(partition) == epoch:
                # Released only to move to new coordinates: the operator did not ask for it.
                del self.released[partition]
            self.workers[partition] = worker
            task = asyncio.create_task(worker.run(), name=f"partition-{partition}")
            self._tasks[partition] = task
            task.add_done_callback(functools.partial(self._ended, worker))

    def _ended(
        self, worker: partitions.PartitionWorker, task: asyncio.Task[handoffs.Outcome]
    ) -> None:
        partition = worker.partition
        if self.workers.get(partition) is worker:
            del self.workers[partition]
            self._tasks.pop(partition, None)
        stats = self.stats.get(partition)
        if stats is not None and partition not in self.workers:
            stats.owned = False
        if task.cancelled():
            outcome: str = "cancelled"
        elif task.exception() is not None:
            logger.error("partition %s: worker crashed", partition, exc_info=task.exception())
            outcome = "failed"
        else:
            outcome = task.result()
        if outcome == "released":
            self.released[partition] = worker.epoch
            self.restarts.ended(partition)
        elif outcome == "lost":
            self._lost[partition] = (worker.epoch, str(worker.error or "ownership lost"))
            self.restarts.ended(partition)
        elif outcome == "failed":
            stale = worker.reopen_wanted.is_set()  # a read made with the key replaced since
            self.restarts.failed(partition, worker.error, epoch=worker.epoch, stale=stale)
        self._wake.set()

    def _hung(self, reason: str, *, drained: bool = False) -> None:
        # In a shutdown the drain first acknowledges the releases that ended, then exits.
        if self.exit_reason is None and (drained or not self._shutdown.is_set()):
            self.exit_reason = reason
            self.exit_process(reason)

    async def _acknowledge(self, reports: Mapping[str, partitionreports.PartitionReport]) -> None:
        await self.acks.write(
            applied_generation=self.applied_generation, released=self.released, reports=reports
        )

    # -- shutdown

    async def _drain(self) -> None:
        """Release every partition within most of the shutdown timeout, then acknowledge."""
        timeout = self.settings.shutdown_timeout
        drained = await shutdowns.stop_all(self.workers, self._tasks, shutdown_s=timeout)
        # A process that read no assignment ran nothing: its predecessor's answer stands.
        if self.latest is not None:  # (and a release it had to cancel is never acknowledged)
            # A partition failing (waiting for its restart) is let go of too: held, it would
            # wait for the hand-off's timeout before its next owner could take it.
            failing = {p for p, r in self.reports().items() if r.state == "failing"}
            running = self.workers.keys() | drained.in_flight
            unrun = acknowledgements.released_unrun(
                self.latest, running, failing=failing, leaving=True
            )
            self.released.update(unrun)
            try:
                async with asyncio.timeout(max(1.0, timeout * 0.1)):
                    await self._acknowledge(self.reports())
            except TimeoutError:
                logger.warning("shutdown: the release acknowledgement timed out")
        if drained.hung:  # a thread that cannot be stopped keeps the process alive: exit
            self._hung(
                f"shutdown: the handler of partitions {drained.hung} still runs", drained=True
            )
