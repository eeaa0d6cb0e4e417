"""Fakes for the failure policy and coordinate changes, beside ``tests.support.consumerfakes``:
a handler that fails on chosen partitions, an in-memory dead-letter store with injectable
write failures, and backends that remember which coordinates they were opened for."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence

from eventhub_balancer import errors
from eventhub_balancer.consumer import assignments, connections, contexts
from tests.support import consumerfakes


class PartitionRecorder(consumerfakes.Recorder):
    """A `consumerfakes.Recorder` that fails so many calls on the partitions named in
    ``fail`` ({partition: calls}; a huge number: a poison batch)."""

    def __init__(self, *, fail: Mapping[str, int]) -> None:
        super().__init__()
        self.fail = dict(fail)

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        if self.fail.get(context.partition, 0) > 0:
            self.fail[context.partition] -= 1
            self.calls += 1
            self.contexts.append(context)
            self.starts.append((consumerfakes.loop_time(), len(events)))
            raise RuntimeError("handler failure (injected)\nsecond line of the error")
        await super().__call__(events, context)


class FakeDeadLetters:
    """Dead letters kept in memory: {name: (events, error, attempts, pod, epoch)}."""

    def __init__(self) -> None:
        self.written: dict[str, tuple[list[tuple[str, int]], str, int, str, int]] = {}
        #: So many next writes fail as if Blob Storage were unreachable.
        self.fail_writes = 0
        self.attempts = 0
        self.write_times: list[float] = []

    async def write(
        self,
        events: Sequence[contexts.ReceivedEvent],
        *,
        error: str,
        attempts: int,
        pod: str,
        epoch: int,
    ) -> str:
        self.attempts += 1
        self.write_times.append(consumerfakes.loop_time())
        if self.fail_writes:
            self.fail_writes -= 1
            raise errors.CheckpointStoreUnreachable("dead-letter write: injected")
        name = f"{events[0].partition}/{events[0].sequence_number}-{events[-1].sequence_number}"
        self.written[name] = (
            [(e.partition, e.sequence_number) for e in events],
            error,
            attempts,
            pod,
            epoch,
        )
        return name


class Backends:
    """Backend factory on one hub and store per event hub name; records every open and
    close, with the coordinates, in order."""

    def __init__(
        self,
        hubs: Mapping[str, tuple[consumerfakes.FakeHub, consumerfakes.FakeStoreHandle]],
        *,
        dead_letters: FakeDeadLetters | None = None,
    ) -> None:
        self.hubs = hubs
        self.dead_letters = dead_letters
        self.log: list[tuple[str, str]] = []

    @contextlib.asynccontextmanager
    async def __call__(
        self, assignment: assignments.Assignment
    ) -> AsyncIterator[connections.Backend]:
        name = assignment.event_hub_name
        hub, store = self.hubs[name]
        self.log.append(("open", name))
        try:
            yield connections.Backend(
                store=store,
                open_receiver=hub.open,
                resolve_start=consumerfakes.resolve_nothing,
                dead_letters=self.dead_letters,
            )
        finally:
            self.log.append(("close", name))
