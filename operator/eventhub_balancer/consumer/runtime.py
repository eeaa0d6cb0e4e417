"""The consumer pod's runtime: applies assignments, runs partition workers, acknowledges.

It follows the assignment source (the pod's ConfigMap), and for every change: releases the
partitions no longer owned (each worker finishes its batch and writes its final checkpoint;
then the runtime writes ``released`` = {partition: epoch}), starts a worker per newly owned
partition, and once every owned partition is fenced and nothing is left to release writes
``applied-generation``. It is Ready when the current generation is applied and no partition
is stuck. On shutdown (SIGTERM) it releases everything within a bounded time, acknowledges,
and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any

from eventhub_balancer import errors, handoffs
from eventhub_balancer.consumer import assignments, connections, metrics, partitions, processing

logger = logging.getLogger(__name__)

#: A failed worker (Event Hubs or Blob Storage unreachable) is restarted after this delay,
#: doubled on every failure in a row, up to the cap.
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
#: The reconcile loop wakes at least this often (restarts, readiness, loop liveness).
TICK_S = 0.5


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeSettings:
    consumer: str
    pod: str
    batch: partitions.BatchSettings = dataclasses.field(default_factory=partitions.BatchSettings)
    #: The whole graceful shutdown (release of every partition) takes at most this long; keep
    #: it below the pod's terminationGracePeriodSeconds (30 s by default).
    shutdown_timeout: float = 25.0


@dataclasses.dataclass
class _Restart:
    failures: int
    not_before: float


class Runtime:
    """Runs one pod's partitions after its assignment source."""

    def __init__(
        self,
        *,
        settings: RuntimeSettings,
        source: assignments.AssignmentSource,
        backends: connections.BackendFactory,
        processor: processing.BatchProcessor,
        spark: Any = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self.backends = backends
        self.processor = processor
        self.spark = spark
        self.stats: dict[str, metrics.PartitionStats] = {}
        self.workers: dict[str, partitions.PartitionWorker] = {}
        self._tasks: dict[str, asyncio.Task[handoffs.Outcome]] = {}
        self.latest: assignments.Assignment | None = None
        self.applied_generation: int | None = None
        self.released: dict[str, int] = {}
        self._lost: dict[str, int] = {}
        self._restarts: dict[str, _Restart] = {}
        self._acked: tuple[int | None, dict[str, int]] | None = None
        self._wake = asyncio.Event()
        self._shutdown = asyncio.Event()
        self._backend: connections.Backend | None = None
        self._backend_key: connections.Coordinates | None = None
        self._backend_stack: contextlib.AsyncExitStack | None = None
        #: Loop time of the last loop pass (None: none yet): /healthz checks that the loop turns.
        self.heartbeat: float | None = None
        self.stopped = False

    # -- what the endpoints ask

    def ready(self) -> tuple[bool, str]:
        """Ready: the current generation is applied and no partition is stuck."""
        if self._shutdown.is_set():
            return False, "shutting down"
        if self.latest is None:
            return False, "no assignment read yet"
        if self.applied_generation != self.latest.generation:
            return False, (
                f"generation {self.latest.generation} not applied yet "
                f"(applied: {self.applied_generation})"
            )
        stuck = sorted(p for p, w in self.workers.items() if w.stuck())
        # A restarted worker that runs again is not failing (its backoff record stays until
        # it ends, so that failures in a row keep doubling the delay).
        wanted = self._wanted()
        failing = sorted(p for p in self._restarts if p in wanted and p not in self.workers)
        if stuck:
            return (
                False,
                f"partitions stuck beyond {self.settings.batch.stuck_seconds:g} s: {stuck}",
            )
        if failing:
            return False, f"partitions failing to start: {failing}"
        return True, f"generation {self.applied_generation} applied"

    def heartbeat_age(self) -> float:
        """Seconds since the reconcile loop last turned (0 before its first turn)."""
        if self.heartbeat is None:
            return 0.0
        return _now() - self.heartbeat

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
                self.heartbeat = _now()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=TICK_S)
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
                await self._close_backend()
                self.stopped = True

    async def _follow_source(self) -> None:
        async for assignment in self.source.updates():
            logger.info(
                "assignment generation %d: %s",
                assignment.generation,
                {p: (e.epoch, e.state) for p, e in assignment.partitions.items()},
            )
            self.latest = assignment
            self._wake.set()

    # -- reconciling

    def _wanted(self) -> dict[str, int]:
        if self.latest is None:
            return {}
        return {p: e.epoch for p, e in self.latest.partitions.items() if e.state == "owned"}

    async def _reconcile(self) -> None:
        assignment = self.latest
        if assignment is None:
            return
        wanted = self._wanted()
        for partition, worker in self.workers.items():
            if wanted.get(partition) != worker.epoch and not worker.releasing:
                logger.info("partition %s: releasing epoch %d", partition, worker.epoch)
                worker.release()
        if wanted:
            try:
                backend = await self._open_backend(assignment)
            except (errors.TransientError, errors.ConfigurationError, errors.InvalidInput) as e:
                logger.error("cannot open the Event Hub or checkpoint store: %s", e)
                backend = None
            if backend is not None:
                self._start_workers(wanted, backend)
        self._release_unrun(assignment)
        for partition in list(self.released):
            if partition in wanted and wanted[partition] > self.released[partition]:
                del self.released[partition]  # ours again, with a newer epoch
        if self._applied(wanted):
            self.applied_generation = assignment.generation
        await self._acknowledge()

    def _release_unrun(self, assignment: assignments.Assignment) -> None:
        """Acknowledge at once the releases of partitions no worker runs (after a restart, or
        lost, or failed): there is nothing to finish."""
        for partition, entry in assignment.partitions.items():
            if handoffs.released_at_once(entry.state, running=partition in self.workers):
                self.released[partition] = entry.epoch

    def _applied(self, wanted: Mapping[str, int]) -> bool:
        for partition, epoch in wanted.items():
            worker = self.workers.get(partition)
            if worker is not None and worker.epoch == epoch:
                if not worker.fenced.is_set():
                    return False
            elif self._lost.get(partition, -1) < epoch and partition not in self._restarts:
                return False
        # Every partition we must give up has been given up.
        return all(wanted.get(p) == w.epoch for p, w in self.workers.items())

    def _start_workers(self, wanted: Mapping[str, int], backend: connections.Backend) -> None:
        now = _now()
        for partition, epoch in wanted.items():
            if partition in self.workers:
                continue  # running, or an older epoch still releasing: start after it ends
            if self._lost.get(partition, -1) >= epoch:
                continue  # a newer owner holds this epoch's partition: wait for a new epoch
            restart = self._restarts.get(partition)
            if restart is not None and now < restart.not_before:
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
                processor=self.processor,
                settings=self.settings.batch,
                stats=stats,
                spark=self.spark,
                # Acknowledge the generation as soon as the last partition is fenced, not at
                # the next tick: the operator and the pod's readiness wait for it.
                on_fenced=self._wake.set,
            )
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
            self._restarts.pop(partition, None)
        elif outcome == "lost":
            self._lost[partition] = worker.epoch
            self._restarts.pop(partition, None)
        elif outcome == "failed":
            previous = self._restarts.get(partition)
            failures = (previous.failures if previous else 0) + 1
            delay = min(RESTART_BACKOFF_S * 2 ** (failures - 1), RESTART_BACKOFF_MAX_S)
            self._restarts[partition] = _Restart(failures, _now() + delay)
            logger.info("partition %s: restarting in %.1f s", partition, delay)
        self._wake.set()

    async def _acknowledge(self) -> None:
        state = (self.applied_generation, dict(self.released))
        if state == self._acked:
            return
        try:
            await self.source.acknowledge(applied_generation=state[0], released=state[1])
        except errors.EventHubBalancerError as e:
            logger.warning("acknowledgement not written (retrying): %s", e)
            return
        self._acked = state
        logger.info("acknowledged generation %s, released %s", state[0], state[1])

    # -- clients

    async def _open_backend(self, assignment: assignments.Assignment) -> connections.Backend:
        key = connections.Coordinates.of(assignment)
        if self._backend is not None and key == self._backend_key:
            return self._backend
        if self._backend is not None:
            if self.workers:
                raise errors.TransientError(
                    "the Event Hub or checkpoint store changed: waiting for the old partitions "
                    "to be released first"
                )
            await self._close_backend()
        stack = contextlib.AsyncExitStack()
        try:
            backend = await stack.enter_async_context(self.backends(assignment))
        except BaseException:
            await stack.aclose()
            raise
        self._backend, self._backend_key, self._backend_stack = backend, key, stack
        return backend

    async def _close_backend(self) -> None:
        stack, self._backend_stack = self._backend_stack, None
        self._backend = self._backend_key = None
        if stack is not None:
            await stack.aclose()

    # -- shutdown

    async def _drain(self) -> None:
        """Release every partition within the shutdown timeout, then acknowledge."""
        timeout = self.settings.shutdown_timeout
        # Leave a little of the budget for the checkpoint and the acknowledgement.
        for worker in self.workers.values():
            worker.release(timeout=max(0.5, timeout * 0.6))
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout * 0.9)
            for task in pending:
                task.cancel()
            if pending:
                logger.warning("shutdown: %d partitions did not release in time", len(pending))
                await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.sleep(0)  # let the done callbacks record the releases
        if self.latest is not None:
            self._release_unrun(self.latest)
        try:
            async with asyncio.timeout(max(1.0, timeout * 0.1)):
                await self._acknowledge()
        except TimeoutError:
            logger.warning("shutdown: the release acknowledgement timed out")


def _now() -> float:
    """The event loop's clock: the one its timers (and a test's fake time) run on."""
    return asyncio.get_running_loop().time()
