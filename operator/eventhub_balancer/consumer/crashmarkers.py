"""Which batch is in the handler, noted where the next process of the same pod finds it.

A handler that kills its process (a segfault in native code, ``os._exit``, the OOM killer)
raises nothing the failure policy could count: the container restarts, resumes at the
checkpoint, hands the same batch to the handler and dies again, for ever. So before each
handler call a partition's worker (`attempts.BatchAttempts`) writes a marker in a small file
per partition (partition, epoch, first and last sequence numbers, attempt), and clears it
once the call has ended. The directory outlives the container but not the pod: the consumer
chart's ``/tmp`` is an emptyDir. A new process that takes the partition up again at the same
epoch finds its predecessor's marker; when the first batch it hands to the handler starts at
the marker's first sequence number, the marker's attempt is a failed attempt of that batch
(the process died in the handler), and the failure policy goes on counting from there.
Batches that end before the marker's (handled, not checkpointed: ``--checkpoint-interval``)
leave it waiting for its batch, and are checkpointed each, so the next death finds the
checkpoint right before the batch.

What it costs: two writes into a file kept open (`markerfiles`): the marker before the handler
call, a cleared record after it, on the event loop, never an fsync: a container restart keeps
the node's page cache, and a node that goes down takes the emptyDir with it anyway. The file
is opened at the partition's first handler call, and closed and removed when its worker ends.

What it trusts: a marker counts only for the pod (name and uid), checkpoint location,
partition and epoch that wrote it; a file that does not hold a whole record (a torn write)
is ignored with a warning and removed. Several markers left means several batches were in
the handler when the process died, and any of them may be the killer: each such batch runs
alone (no other handler call of the pod at the same time, `turn`) until it is done, so a
death is pinned on one batch before it counts towards giving a batch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import contexts, deathrecords, markerfiles, processing
from eventhub_balancer.consumer.markerfiles import Marker
from eventhub_balancer.contracts import failurepolicy

logger = logging.getLogger(__name__)

#: Where markers go unless ``--crash-marker-dir`` says (the chart mounts an emptyDir at /tmp).
DEFAULT_DIRECTORY = Path(tempfile.gettempdir()) / "ehb-crash-markers"
#: A batch to run alone waits at most this long for the other handler calls to end (a call
#: that never ends is reported stuck); past it, it runs beside them.
ALONE_WAIT_S = 60.0


class ProcessDied(Exception):
    """The previous process of this pod died with this batch in the handler: a failed attempt
    of the batch, counted by the process that takes the partition up again. ``moved``: the
    count came with the partition from its previous owner (`deathrecords`)."""

    def __init__(self, attempt: int, *, moved: bool = False) -> None:
        self.attempt = attempt
        super().__init__(
            f"attempt {attempt} never ended on the partition's previous owner, after a process "
            "died in the handler (killed by a signal, out of memory, or exited)"
            if moved
            else f"the process died in the handler on attempt {attempt} (killed by a signal, "
            "out of memory, or exited) and its container restarted"
        )


def location_of(coordinates: object) -> str:
    """A short, stable name of a checkpoint location (`connections.Coordinates`)."""
    return hashlib.sha256(repr(coordinates).encode()).hexdigest()[:16]


class CrashMarkers:
    """The markers of one pod's partitions, and the turns of the batches that run alone."""

    def __init__(self, directory: Path | None, *, pod: str, pod_uid: str = "") -> None:
        self.pod = pod
        self.pod_uid = pod_uid
        self.directory = directory
        #: The open files (None: the markers are off).
        self.files: markerfiles.MarkerFiles | None = None
        #: What the previous process of this pod left: {partition: marker}, taken once each.
        self.left: dict[str, Marker] = {}
        if directory is not None:
            self.files = markerfiles.MarkerFiles(directory, pod=pod)
            try:
                directory.mkdir(parents=True, exist_ok=True)
                self.left = self._read_left(self.files)
            except OSError as e:
                self._off(e)
        #: Partitions whose left batch runs alone until it is done (several were left).
        self.suspects: set[str] = set(self.left) if len(self.left) > 1 else set()
        for partition in self.suspects:
            # Kept in memory only: a suspect that has not run again when this process dies did
            # not kill it, and its marker would make the next death look shared again.
            if self.files is not None:
                with contextlib.suppress(OSError):
                    self.files.path(partition).unlink()
        self._running = 0
        self._alone = False
        self._waiting_alone = 0
        self._waiters: list[asyncio.Future[None]] = []

    def _read_left(self, files: markerfiles.MarkerFiles) -> dict[str, Marker]:
        left: dict[str, Marker] = {}
        for path in files.paths():
            try:
                marker = markerfiles.decode(path.read_bytes())
            except (OSError, ValueError) as e:
                logger.warning("crash marker %s ignored and removed: unreadable (%s)", path, e)
                marker = None
            if marker is None:  # no call was in the handler (or nothing to read): not kept
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            if (marker.pod, marker.pod_uid) != (self.pod, self.pod_uid):
                logger.info("crash marker %s ignored: another pod's (uid %r)", path, marker.pod_uid)
                continue
            if path != files.path(marker.partition):
                logger.warning(
                    "crash marker %s ignored: it names partition %r", path, marker.partition
                )
                continue
            left[marker.partition] = marker
        if left:
            logger.warning(
                "the previous process of this pod died with batches in the handler: %s",
                ", ".join(
                    f"partition {m.partition} epoch {m.epoch} from sequence number "
                    f"{m.first} (attempt {m.attempt})"
                    for m in left.values()
                ),
            )
        return left

    def _off(self, error: OSError) -> None:
        logger.warning(
            "crash markers off: cannot write %s (%s); a batch whose handler kills the process "
            "will not be counted as failing: mount a writable emptyDir there or set "
            "--crash-marker-dir",
            self.directory,
            error,
        )
        if self.files is not None:
            # A marker left standing would count a later death outside the handler.
            self.files.close_all()
        self.directory = self.files = None

    def partition(self, partition: str, epoch: int, coordinates: object) -> PartitionMarks:
        """The markers of ``partition``'s worker at ``epoch`` on ``coordinates``."""
        location = location_of(coordinates)
        return PartitionMarks(
            self, partition, epoch, location, self.take(partition, epoch=epoch, location=location)
        )

    def take(self, partition: str, *, epoch: int, location: str) -> Marker | None:
        """The marker the previous process left for ``partition`` at this epoch and location
        (None: none); each is taken once."""
        marker = self.left.pop(partition, None)
        if marker is None:
            return None
        if (marker.epoch, marker.location) != (epoch, location):
            logger.info(
                "partition %s: crash marker of epoch %d ignored (now epoch %d%s)",
                partition,
                marker.epoch,
                epoch,
                "" if marker.location == location else ", other coordinates",
            )
            self.suspects.discard(partition)
            return None
        return marker

    def enter(self, partition: str, body: bytes) -> None:
        """Before the handler call: the call of `markerfiles.body` ``body`` is in it."""
        if self.files is not None:
            try:
                self.files.enter(partition, body)
            except OSError as e:
                self._off(e)

    def leave(self, partition: str, body: bytes) -> None:
        """The handler call that entered ``body`` has ended."""
        if self.files is not None:
            try:
                self.files.leave(partition, body)
            except OSError as e:
                self._off(e)

    def close(self, partition: str) -> None:
        """``partition``'s worker ended: its file goes (once no call of it stands there)."""
        if self.files is not None:
            self.files.close(partition)

    def settled(self, partition: str) -> None:
        """``partition``'s left batch is done (or another batch came): it runs alone no more."""
        if partition in self.suspects:
            self.suspects.discard(partition)
            self._wake()

    @contextlib.asynccontextmanager
    async def turn(self, partition: str) -> AsyncIterator[None]:
        """One handler call: a suspect's alone, the others never beside a suspect's."""
        alone = partition in self.suspects
        if alone:
            self._waiting_alone += 1
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(ALONE_WAIT_S):
                        await self._until(lambda: self._running == 0 and not self._alone)
            finally:
                self._waiting_alone -= 1
                self._wake()
            self._alone = True
        else:
            await self._until(lambda: not self._alone and not self._waiting_alone)
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            if alone:
                self._alone = False
            self._wake()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                self._waiters.remove(waiter)

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


class PartitionMarks:
    """One partition worker's markers: its handler calls, and the death its predecessor left."""

    def __init__(
        self, markers: CrashMarkers, partition: str, epoch: int, location: str, left: Marker | None
    ) -> None:
        self.markers = markers
        self.partition = partition
        self.epoch = epoch
        self.location = location
        #: The batch the previous process died in, until the worker's first batch is cut.
        self.left = left
        #: The deaths the partition's checkpoint blob counts, and how to write them there.
        self.record = deathrecords.DeathRecord(partition)
        #: What every marker of this worker starts with (encoded once).
        self._identity = markerfiles.identity(
            markers.pod, markers.pod_uid, location, partition, epoch
        )

    async def resume(
        self, events: Sequence[deliveries.ReceivedEvent], policy: failurepolicy.Processing
    ) -> tuple[int, ProcessDied | None]:
        """`first_attempt`; a death counted, with attempts left, goes into the checkpoint blob
        before the next attempt (`deathrecords`)."""
        attempt, died = self.first_attempt(events)
        if died is not None and attempt < policy.max_attempts:
            await self.record.attempting(events[0].sequence_number, attempt + 1)
        return attempt, died

    def first_attempt(
        self, events: Sequence[deliveries.ReceivedEvent]
    ) -> tuple[int, ProcessDied | None]:
        """For the worker's first batch: the number of its first attempt, and the death to count
        as that attempt (None: call the handler). The previous process died in this very
        batch when it starts where the marker's did (the checkpoint has not moved). A death
        several batches may have caused counts for none of them: the batch runs alone, as
        the attempt it died in, so that a death of its own is pinned on it. Without a marker,
        the deaths the checkpoint blob counts for the batch come with the partition."""
        marker, self.left = self.left, None
        if marker is None:
            carried = self.record.carried_to(events[0].sequence_number)
            return (1, None) if carried is None else (carried, ProcessDied(carried, moved=True))
        if events[-1].sequence_number < marker.first:
            # Handled before, but not checkpointed (`--checkpoint-interval`): the marker waits
            # for its batch, and the worker checkpoints meanwhile (`waiting`).
            self.left = marker
            return 1, None
        if events[0].sequence_number != marker.first:
            logger.info(
                "partition %s: the previous process died in the handler of the batch from "
                "sequence number %d, which is not this batch (from %d): not counted",
                self.partition,
                marker.first,
                events[0].sequence_number,
            )
            self.settled()
            return 1, None
        if self.partition in self.markers.suspects:
            logger.warning(
                "partition %s: the batch from sequence number %d was in the handler with others "
                "when the process died: it runs alone (attempt %d again) to tell which killed it",
                self.partition,
                marker.first,
                marker.attempt,
            )
            return marker.attempt, None
        return marker.attempt, ProcessDied(marker.attempt)

    @property
    def waiting(self) -> bool:
        """The batch the previous process died in is still ahead: the worker checkpoints
        after every batch until it comes, whatever its interval, so that a death in it
        finds the checkpoint right before it."""
        return self.left is not None

    async def call(
        self,
        processor: processing.BatchProcessor,
        events: Sequence[deliveries.ReceivedEvent],
        context: contexts.BatchContext,
    ) -> None:
        """``processor(events, context)`` with its marker standing while it runs."""
        markers = self.markers
        async with markers.turn(self.partition):
            body = markerfiles.body(
                self._identity,
                context.first_sequence_number,
                context.last_sequence_number,
                context.attempt,
            )
            markers.enter(self.partition, body)
            try:
                await processor(events, context)
            finally:
                # Reached only once the call really ended (a sync handler's thread included).
                markers.leave(self.partition, body)

    def settled(self) -> None:
        """The batch is done: unless the one the previous process died in is still ahead
        (`waiting`), the partition's batches run alone no more."""
        if self.left is None:
            self.markers.settled(self.partition)

    def ended(self) -> None:
        """The worker ended: its marker file is closed and removed."""
        self.left = None
        self.markers.settled(self.partition)
        self.markers.close(self.partition)
