"""A model-based test of the pod side of the hand-off, on fake time: two real consumer
runtimes ("pod-a", "pod-b") over one in-memory hub and checkpoint store.

Hypothesis plays the operator by the rules of `eventhub_balancer.handoffs`: it appends
events, revokes a partition on its owner and, once the owner acknowledged the release of that
epoch, gives it to the other pod at epoch + 1 (a planned move); or it gives a partition to
the other pod at epoch + 1 without waiting (a forced takeover: the hand-off timed out, or the
owner was taken as gone), telling the old owner or not. It injects the faults the pods live
with (handler errors, slow handler calls, checkpoint fences and writes that fail, receive
links that fail) and lets fake time pass. After every step, over the fakes' own record of
every fence, checkpoint write and handler call:

1. a partition's checkpoint never moves backwards, and only the pod holding the blob's epoch
   writes it, at an event its handler finished;
2. once a pod acknowledged the release of a partition at an epoch, its handler gets no more
   events of that partition at that epoch (and none is in the handler then);
3. a planned move repeats nothing: the final checkpoint covers every event the old owner
   finished and the new owner starts right after it. An event is processed twice only after
   a forced takeover (and then only past the checkpoint at the takeover) or after a worker
   failed (then at most one batch per failure, docs/consumer.md "Delivery guarantees");
4. after a quiet spell, every event was processed and each checkpoint is the last event
   (with a checkpoint interval, once every partition was released: the release writes the
   rest);
5. without faults, a revoked partition is acknowledged released within `release_bound`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence

import looptime
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from eventhub_balancer import handoffs
from eventhub_balancer.consumer import assignments, contexts, partitions, restarts, runtime
from tests.support import consumerfakes

#: A failure is shrunk for up to Hypothesis's own five minutes: past the suite's timeout.
pytestmark = pytest.mark.timeout(900)

PODS = ("pod-a", "pod-b")
PARTITIONS = ("0", "1", "2", "3")
#: Full batches of 10; an idle worker wakes every half second (a shorter max_wait only costs
#: loop turns, it changes no rule).
BATCH = {"batch_size": 10, "max_wait": 0.5, "retry_backoff": 0.2, "retry_backoff_max": 1.0}
#: The CR's default handoffTimeoutSeconds: in the quiet spell, the operator takes over a
#: partition whose release is not acknowledged within it.
HANDOFF_TIMEOUT = 30.0
#: How long a handler call takes, as the fault rule sets it: 25 s outlives the release
#: timeout (20 s), so that the release abandons the batch.
DURATIONS = (0.0, 0.3, 2.0, 8.0, 25.0)


def release_bound(batch: partitions.BatchSettings, slowest_call: float) -> float:
    """How long after its revocation a fault-free pod acknowledges the release.

    The revocation reaches the runtime at once (the source is in-process) and stops the
    worker: a batch still being gathered is dropped at once (receiving is cancellation-safe),
    so `max_wait` does not count; a handler call in flight is waited for, at most until the
    release timeout abandons it; the final checkpoint is one write, never retried (a failed
    write fails the worker, and a revoked partition no worker runs is acknowledged at once,
    `handoffs.released_at_once`). The worker's end wakes the runtime, which acknowledges; one
    reconcile tick is the slack.
    """
    return min(slowest_call, batch.release_timeout) + runtime.TICK_S


@dataclasses.dataclass
class Run:
    """One worker's hold of a partition: from its fence to its end."""

    #: The order in which the runs began (their fences), over both pods.
    index: int
    pod: str
    partition: str
    epoch: int
    #: The checkpoint it fenced at: it receives from the event after.
    start: int
    finished: list[int] = dataclasses.field(default_factory=list)
    #: How the worker ended (`handoffs.Outcome`, or "cancelled"); None while it runs.
    outcome: str | None = None


@dataclasses.dataclass(frozen=True)
class Write:
    pod: str
    partition: str
    epoch: int
    #: The blob's epoch just before the write.
    held: int
    sequence_number: int
    run: Run


class Ledger:
    """What the pods did, as the fakes saw it: every run, checkpoint write and finished event.
    What goes wrong inside the runtimes' own calls is kept in `problems` (an assertion there
    would only fail a worker) and asserted by the state machine."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.current: dict[tuple[str, str], Run] = {}
        self.writes: list[Write] = []
        #: (partition, sequence number) -> every run that finished it.
        self.finishes: dict[tuple[str, int], list[Run]] = collections.defaultdict(list)
        self.problems: list[str] = []

    def begin(self, pod: str, partition: str, epoch: int, start: int) -> Run:
        run = Run(len(self.runs), pod, partition, epoch, start)
        self.runs.append(run)
        self.current[(pod, partition)] = run
        return run

    def ended(self, run: Run, task: asyncio.Task[handoffs.Outcome]) -> None:
        if task.cancelled():
            run.outcome = "cancelled"
        elif task.exception() is not None:
            run.outcome = "crashed"
            self.problems.append(f"{run}: the worker crashed: {task.exception()!r}")
        else:
            run.outcome = task.result()

    def wrote(self, pod: str, partition: str, epoch: int, held: int, sequence_number: int) -> None:
        run = self.current[(pod, partition)]
        self.writes.append(Write(pod, partition, epoch, held, sequence_number, run))

    def finished(self, pod: str, context: contexts.BatchContext, numbers: Sequence[int]) -> None:
        run = self.current.get((pod, context.partition))
        if run is None or run.epoch != context.epoch or run.outcome is not None:
            self.problems.append(f"{pod}: finished {context} outside a fenced run ({run})")
            return
        run.finished.extend(numbers)
        for number in numbers:
            self.finishes[(context.partition, number)].append(run)


class Handle(consumerfakes.FakeStoreHandle):
    """One pod's store handle that tells the ledger of every fence and write."""

    def __init__(self, store: consumerfakes.FakeStore, owner: str, ledger: Ledger) -> None:
        super().__init__(store, owner)
        self.ledger = ledger

    async def fence(
        self, partition: str, epoch: int, *, start: object
    ) -> consumerfakes.FakeCheckpoint:
        taken = await super().fence(partition, epoch, start=start)
        run = self.ledger.begin(self.owner, partition, epoch, taken.sequence_number)
        # The fence is awaited by the worker's own task: its result is the worker's outcome.
        task = asyncio.current_task()
        assert task is not None
        task.add_done_callback(functools.partial(self.ledger.ended, run))
        return taken

    async def update(
        self, partition: str, *, offset: str, sequence_number: int
    ) -> consumerfakes.FakeCheckpoint:
        held = self.store.blobs[partition].epoch
        written = await super().update(partition, offset=offset, sequence_number=sequence_number)
        self.ledger.wrote(self.owner, partition, written.epoch, held, sequence_number)
        return written


class Handler(consumerfakes.Recorder):
    """The pod's handler: records each finished event with the run it belongs to, and the
    calls in flight."""

    def __init__(self, pod: str, ledger: Ledger) -> None:
        super().__init__()
        self.pod = pod
        self.ledger = ledger
        self.in_flight: collections.Counter[tuple[str, int]] = collections.Counter()

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        key = (context.partition, context.epoch)
        self.in_flight[key] += 1
        try:
            await super().__call__(events, context)
        finally:
            self.in_flight[key] -= 1
        self.ledger.finished(self.pod, context, [e.sequence_number for e in events])


@dataclasses.dataclass(frozen=True)
class Ack:
    """The first acknowledgement of a release: when, how many handler calls had begun, and
    how many calls of that partition and epoch were still running."""

    at: float
    calls: int
    running: int


class Source(assignments.MemorySource):
    """The pod's ConfigMap, remembering when each release was first acknowledged."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler
        self.acked: dict[tuple[str, int], Ack] = {}

    async def acknowledge(
        self,
        *,
        applied_generation: int | None,
        released: Mapping[str, int],
        reports: assignments.Reports | None = None,
    ) -> bool:
        for key in released.items():
            if key not in self.acked:
                self.acked[key] = Ack(
                    consumerfakes.loop_time(),
                    len(self.handler.contexts),
                    self.handler.in_flight[key],
                )
        return await super().acknowledge(
            applied_generation=applied_generation, released=released, reports=reports
        )


@dataclasses.dataclass
class Held:
    """A partition as the operator wrote it."""

    owner: str
    epoch: int
    state: handoffs.WrittenState = "owned"
    revoked_at: float | None = None


@dataclasses.dataclass
class Revocation:
    pod: str
    partition: str
    epoch: int
    at: float
    bound: float
    #: Handler calls of the partition in flight at the revocation.
    in_flight: int
    #: Held to the bound: no fault was pending at the revocation, none came since, and the
    #: operator still waits for the release (no takeover ended the hand-off).
    bounded: bool


@dataclasses.dataclass
class Move:
    """A planned move: the new owner's first event must be ``first``, the one right after
    the final checkpoint."""

    pod: str
    partition: str
    epoch: int
    first: int


class HandOffs(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = looptime.new_event_loop()
        self.ledger = Ledger()
        self.hub = consumerfakes.FakeHub()
        self.store = consumerfakes.FakeStore()
        self.handles = {pod: Handle(self.store, pod, self.ledger) for pod in PODS}
        self.handlers = {pod: Handler(pod, self.ledger) for pod in PODS}
        self.sources = {pod: Source(self.handlers[pod]) for pod in PODS}
        self.runtimes: dict[str, runtime.Runtime] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.exits: list[str] = []
        self.batch = partitions.BatchSettings(**BATCH)
        self.parts: dict[str, Held] = {}
        #: (partition, epoch) -> the pod it was given to.
        self.given: dict[tuple[str, int], str] = {}
        self.generations = dict.fromkeys(PODS, 0)
        #: (partition, epoch) -> the checkpoint when that epoch's owner was taken over by force.
        self.forced: dict[tuple[str, int], int] = {}
        self.revocations: list[Revocation] = []
        self.moves: list[Move] = []
        #: The longest handler call each pod's handler was set to take.
        self.slowest = dict.fromkeys(PODS, 0.0)

    # -- running the pods

    @initialize(
        owners=st.tuples(*(st.sampled_from(PODS) for _ in PARTITIONS)),
        interval=st.sampled_from((0.0, 2.0)),
        durations=st.tuples(*(st.sampled_from(DURATIONS) for _ in PODS)),
    )
    def start(self, owners: tuple[str, ...], interval: float, durations: tuple[float, ...]) -> None:
        """The operator's first assignment; a checkpoint after every batch, or at most every
        2 s (then the final checkpoint of a release carries the rest); how long each pod's
        handler calls take to begin with."""
        self.batch = partitions.BatchSettings(**BATCH, checkpoint_interval=interval)
        for pod, seconds in zip(PODS, durations, strict=True):
            self.slow_handler(pod, seconds)
        for partition, pod in zip(PARTITIONS, owners, strict=True):
            self.parts[partition] = Held(pod, 1)
            self.given[(partition, 1)] = pod
        self.loop.run_until_complete(self._start())
        for pod in PODS:
            self._write(pod)
        self._pass(1.0)

    async def _start(self) -> None:
        for pod in PODS:
            self.runtimes[pod] = runtime.Runtime(
                settings=runtime.RuntimeSettings(consumer="orders", pod=pod, batch=self.batch),
                source=self.sources[pod],
                backends=consumerfakes.fake_backends(self.hub, self.handles[pod]),
                processor=self.handlers[pod],
                exit_process=self.exits.append,
            )
            self.tasks[pod] = asyncio.create_task(self.runtimes[pod].run())

    def teardown(self) -> None:
        async def stop() -> None:
            for consumer in self.runtimes.values():
                consumer.request_shutdown()
            if self.tasks:
                await asyncio.wait(self.tasks.values(), timeout=30)
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            self.loop.run_until_complete(stop())
        finally:
            self.loop.close()

    def _now(self) -> float:
        return self.loop.time()

    def _pass(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def _write(self, pod: str) -> None:
        """A new generation of the pod's ConfigMap, from what the operator holds now."""
        self.generations[pod] += 1
        held = {p: (h.epoch, h.state) for p, h in self.parts.items() if h.owner == pod}
        self.sources[pod].put(consumerfakes.configmap(self.generations[pod], held, pod=pod))

    def _checkpoint(self, partition: str) -> int:
        blob = self.store.blobs.get(partition)
        return -1 if blob is None else blob.sequence_number

    def _give(self, partition: str, *, tell: bool) -> str:
        """Give the partition to the other pod at epoch + 1 (`handoffs.EPOCH_STEP`)."""
        old = self.parts[partition]
        new = next(pod for pod in PODS if pod != old.owner)
        epoch = old.epoch + handoffs.EPOCH_STEP["free"]
        self.parts[partition] = Held(new, epoch)
        self.given[(partition, epoch)] = new
        self._write(new)
        if tell:
            self._write(old.owner)
        return new

    def _faulted(self) -> None:
        """A fault came: the releases under way are no longer held to the fault-free bound."""
        for revocation in self.revocations:
            revocation.bounded = False

    def _acknowledged(self, partition: str) -> bool:
        held = self.parts[partition]
        return held.state == "revoking" and (
            self.sources[held.owner].released.get(partition) == held.epoch
        )

    # -- the operator

    @rule(partition=st.sampled_from(PARTITIONS), count=st.integers(1, 25))
    def append(self, partition: str, count: int) -> None:
        self.hub.append(partition, count)

    @rule(partition=st.sampled_from(PARTITIONS))
    def revoke(self, partition: str) -> None:
        """Mark the partition revoking on its owner."""
        held = self.parts[partition]
        if held.state != "owned":
            return
        held.state, held.revoked_at = "revoking", self._now()
        pending = (
            self.handlers[held.owner].fail_next
            or self.handles[held.owner].fail_fences
            or self.handles[held.owner].fail_updates
        )
        self.revocations.append(
            Revocation(
                held.owner,
                partition,
                held.epoch,
                self._now(),
                release_bound(self.batch, self.slowest[held.owner]),
                self.handlers[held.owner].in_flight[(partition, held.epoch)],
                bounded=not pending,
            )
        )
        self._write(held.owner)

    @rule(partition=st.sampled_from(PARTITIONS))
    def revoke_mid_call(self, partition: str) -> None:
        """A batch arrives, and the partition is revoked as soon as its owner's handler has a
        call of it in flight (if one begins within a few batches' time)."""
        held = self.parts[partition]
        if held.state != "owned":
            return
        self.hub.append(partition, self.batch.batch_size)
        handler, key = self.handlers[held.owner], (partition, held.epoch)
        for _ in range(40):
            if handler.in_flight[key]:
                break
            self._pass(self.batch.max_wait / 10)
        self.revoke(partition)

    @precondition(lambda self: any(self._acknowledged(p) for p in self.parts))
    @rule(data=st.data())
    def hand_over(self, data: st.DataObject) -> None:
        """The owner acknowledged the release: the partition goes on at epoch + 1."""
        partition = data.draw(st.sampled_from([p for p in PARTITIONS if self._acknowledged(p)]))
        self._hand_over(partition)

    def _hand_over(self, partition: str) -> None:
        old = self.parts[partition]
        final = self._checkpoint(partition)
        run = self.ledger.current.get((old.owner, partition))
        clean = run is not None and run.epoch == old.epoch and run.outcome == "released"
        if clean:
            assert run is not None
            # Invariant 3: the final checkpoint covers every event the released run finished.
            assert final >= max(run.finished, default=-1), (run, final)
        new = self._give(partition, tell=True)
        if clean and self.store.blobs[partition].epoch == old.epoch:
            # Every older owner is fenced out at the blob, the old one released: nobody moves
            # the checkpoint before the new owner fences at it.
            self.moves.append(Move(new, partition, old.epoch + 1, final + 1))

    @rule(partition=st.sampled_from(PARTITIONS), tell=st.booleans())
    def take_over(self, partition: str, tell: bool) -> None:
        """Forced: the new epoch fences the old owner out at the hub and at the blob. Not
        telling the old owner is a gone pod that still runs, or a ConfigMap watch behind."""
        epoch = self.parts[partition].epoch
        self.forced[(partition, epoch)] = self._checkpoint(partition)
        for revocation in self.revocations:
            if (revocation.partition, revocation.epoch) == (partition, epoch):
                # The operator waits no more; the new owner's fence may find the old worker
                # before its release does, and then it ends lost, with nothing to acknowledge.
                revocation.bounded = False
        self._give(partition, tell=tell)

    # -- faults

    @rule(pod=st.sampled_from(PODS), count=st.integers(1, 3))
    def handler_fails(self, pod: str, count: int) -> None:
        self.handlers[pod].fail_next = count
        self._faulted()

    @rule(pod=st.sampled_from(PODS), count=st.integers(1, 3), fences=st.booleans())
    def store_fails(self, pod: str, count: int, fences: bool) -> None:
        if fences:
            self.handles[pod].fail_fences = count
        else:
            self.handles[pod].fail_updates = count
        self._faulted()

    @rule(pod=st.sampled_from(PODS), seconds=st.sampled_from(DURATIONS))
    def slow_handler(self, pod: str, seconds: float) -> None:
        """The pod's handler calls take ``seconds`` from now on. A release the pod has not
        acknowledged yet may wait for such a call: the revocation reaches its runtime in the
        same turn of the loop as a batch that begins a call (replayed: a batch appended after
        a revocation, the handler made 2 s slow, and the call began as the revocation
        arrived), so its bound is raised to the new pace."""
        self.handlers[pod].duration = seconds
        self.slowest[pod] = max(self.slowest[pod], seconds)
        for revocation in self.revocations:
            if revocation.pod == pod and (
                (revocation.partition, revocation.epoch) not in self.sources[pod].acked
            ):
                bound = release_bound(self.batch, self.slowest[pod])
                revocation.bound = max(revocation.bound, bound)

    @rule(partition=st.sampled_from(PARTITIONS))
    def hub_fails(self, partition: str) -> None:
        self.hub.fail(partition)
        self._faulted()

    @rule(seconds=st.sampled_from((0.1, 0.4, 1.0, 3.0, 10.0, 30.0)))
    def time_passes(self, seconds: float) -> None:
        self._pass(seconds)

    @rule()
    def quiet(self) -> None:
        """Invariant 4: the faults stop and the operator goes on by the rules (hand over what
        is released, take over what is not within the hand-off timeout); within the bound
        every event is processed and every checkpoint is its partition's last event.

        With a checkpoint interval the checkpoint is written after a batch at most that often
        and "the release writes the rest" (docs/consumer.md, ``--checkpoint-interval``): an
        idle partition keeps its last batches uncheckpointed until the interval is over or it
        is released. So there every partition is then moved once, as in a rolling update,
        before the check.
        """
        for pod in PODS:
            self.handlers[pod].fail_next = 0
            self.handlers[pod].duration = 0.0
            self.handles[pod].fail_fences = self.handles[pod].fail_updates = 0
        if self.batch.checkpoint_interval:
            self._settle(self._caught_up)
            assert self._caught_up(), self._state()
            for partition in PARTITIONS:
                self.revoke(partition)
        self._settle(self._checkpointed)
        assert self._checkpointed(), self._state()
        # One more event each: the owners of the moves above show where they start.
        for partition in PARTITIONS:
            self.hub.append(partition, 1)
        self._settle(self._caught_up)
        assert self._caught_up(), self._state()

    def _settle(self, done: Callable[[], bool]) -> None:
        """Let time pass and play the operator until ``done``, or at most the bound: a worker
        in its longest restart backoff, a release abandoning its batch, a hand-off timing
        out; the backlog goes in full batches that do not wait."""
        bound = (
            restarts.RESTART_BACKOFF_MAX_S
            + self.batch.release_timeout
            + HANDOFF_TIMEOUT
            + 5 * runtime.TICK_S
        )
        began = self._now()
        # Time passes first: a fault injected last (a failed link) shows before ``done``.
        while True:
            self._pass(1.0)
            for partition, held in self.parts.items():
                if self._acknowledged(partition):
                    self._hand_over(partition)
                elif held.state == "revoking":
                    assert held.revoked_at is not None
                    if self._now() - held.revoked_at >= HANDOFF_TIMEOUT:
                        self.take_over(partition, tell=True)
            if done() or self._now() - began >= bound:
                return

    def _caught_up(self) -> bool:
        """Every partition is owned, its owner's worker runs at its epoch and has finished
        every event after the checkpoint it fenced at, and every earlier one was finished."""
        for partition, held in self.parts.items():
            run = self.ledger.current.get((held.owner, partition))
            if held.state != "owned" or run is None or run.epoch != held.epoch:
                return False
            if run.outcome is not None:
                return False  # ended (failed): its restart is due
            count = len(self.hub.events.get(partition, []))
            if not set(range(run.start + 1, count)) <= set(run.finished):
                return False
            assert all((partition, n) in self.ledger.finishes for n in range(run.start + 1))
        return True

    def _checkpointed(self) -> bool:
        """Caught up, and every checkpoint is its partition's last event."""
        return self._caught_up() and all(
            self._checkpoint(p) == len(self.hub.events.get(p, [])) - 1 for p in PARTITIONS
        )

    def _state(self) -> object:
        return {
            p: (h, self.store.blobs.get(p), len(self.hub.events.get(p, [])))
            for p, h in self.parts.items()
        }

    # -- what must always hold

    @invariant()
    def the_pods_run(self) -> None:
        assert not self.ledger.problems, self.ledger.problems
        assert not self.exits, self.exits
        for pod, task in self.tasks.items():
            assert not task.done(), (pod, task)

    @invariant()
    def checkpoints_move_forward_by_their_holder(self) -> None:
        """Invariant 1."""
        for partition, history in self.store.history.items():
            assert history == sorted(history), (partition, history)
        for run in self.ledger.runs:
            assert self.given[(run.partition, run.epoch)] == run.pod, run
        for write in self.ledger.writes:
            assert self.given[(write.partition, write.epoch)] == write.pod, write
            assert write.held == write.epoch, write
            assert write.run.epoch == write.epoch, write
            assert write.sequence_number in write.run.finished, write
        for partition, blob in self.store.blobs.items():
            assert blob.epoch <= self.parts[partition].epoch, (partition, blob)
            assert self.given[(partition, blob.epoch)] == blob.owner_id, (partition, blob)

    @invariant()
    def nothing_after_a_release(self) -> None:
        """Invariant 2."""
        for pod in PODS:
            handler = self.handlers[pod]
            for (partition, epoch), ack in self.sources[pod].acked.items():
                assert ack.running == 0, (pod, partition, epoch, ack)
                later = [
                    c
                    for c in handler.contexts[ack.calls :]
                    if (c.partition, c.epoch) == (partition, epoch)
                ]
                assert not later, (pod, partition, epoch, later)

    @invariant()
    def repeats_only_after_a_takeover_or_a_failure(self) -> None:
        """Invariant 3: of two runs that finished one event, the earlier must have been taken
        over by force (and the event be past the checkpoint then) or have failed."""
        repeated: dict[int, set[int]] = collections.defaultdict(set)
        for (partition, number), runs in self.ledger.finishes.items():
            ordered = sorted(runs, key=lambda r: r.index)
            for i, earlier in enumerate(ordered):
                for later in ordered[i + 1 :]:
                    assert later is not earlier, (partition, number, earlier)
                    taken = self.forced.get((partition, earlier.epoch))
                    if taken is not None and number > taken:
                        continue
                    assert earlier.outcome == "failed", (partition, number, earlier, later)
                    repeated[earlier.index].add(number)
        if self.batch.checkpoint_interval == 0:
            # docs/consumer.md: a crash repeats at most the batch in the handler or the one
            # whose checkpoint write was in flight, never both.
            for index, numbers in repeated.items():
                assert len(numbers) <= self.batch.batch_size, (self.ledger.runs[index], numbers)

    @invariant()
    def a_planned_move_starts_after_the_final_checkpoint(self) -> None:
        """Invariant 3, the new owner's side."""
        for move in self.moves:
            first = next(
                (
                    c
                    for c in self.handlers[move.pod].contexts
                    if (c.partition, c.epoch) == (move.partition, move.epoch)
                ),
                None,
            )
            if first is not None:
                assert first.first_sequence_number == move.first, (move, first)

    @invariant()
    def releases_come_within_the_bound(self) -> None:
        """Invariant 5."""
        for revocation in self.revocations:
            if not revocation.bounded:
                continue
            ack = self.sources[revocation.pod].acked.get((revocation.partition, revocation.epoch))
            took = (ack.at if ack is not None else self._now()) - revocation.at
            assert took <= revocation.bound + 1e-6, (revocation, ack, took)


HandOffs.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_hand_offs_between_two_pods = HandOffs.TestCase
