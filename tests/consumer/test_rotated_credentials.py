"""A key rotated under a running pod whose connection strings come from files (a mounted
Secret, ``EHB_*_CONNECTION_STRING_FILE``): the pod reads the new value when the kubelet
rewrites the file, swaps what that string feeds under its running partitions (a storage key:
the checkpoint store's client; an Event Hubs key: the receive links, reopened at the same
epoch), and its failing partitions recover without a restart; an unchanged file reopens
nothing; garbage in the file is refused with what to fix, and the clients that may still work
are kept.

Over the in-memory fakes, on fake loop time: the fakes take only the keys they accept, as
Event Hubs and Blob Storage do once the old key is regenerated.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import (
    assignments,
    connections,
    partitions,
    processing,
    restarts,
    runtime,
    secretfiles,
    settings,
)
from tests.consumer import test_runtime
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

PARTITIONS = {"0": (1, "owned"), "1": (1, "owned")}

P = TypeVar("P", bound=processing.BatchProcessor)


def eventhub_string(key: str) -> str:
    return (
        f"Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=app;SharedAccessKey={key}"
    )


def blob_string(key: str) -> str:
    return (
        f"DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={key};"
        "EndpointSuffix=core.windows.net"
    )


def key_of(connection_string: str | None) -> str:
    assert connection_string is not None
    return connection_string.rsplit("Key=", 1)[1].split(";")[0]


class Keys:
    """The keys a service takes now: regenerating one refuses it from then on."""

    def __init__(self, *accepted: str) -> None:
        self.accepted = set(accepted)


class RefusingReceiver(consumerfakes.FakeReceiver):
    """A receiver whose link is refused when its key is not (or no longer) accepted."""

    def __init__(self, keys: Keys, key: str, *args: Any) -> None:
        super().__init__(*args)
        self.keys, self.key = keys, key

    def start(self) -> None:
        if self.key not in self.keys.accepted:
            self.started = True
            self.buffer.fail(errors.EventHubAuthenticationFailed("Unauthorized: key refused"))
            return
        super().start()


class KeyedStore(consumerfakes.FakeStoreHandle):
    """The fake store's handle, for one storage key: refused once the key is not accepted."""

    def __init__(
        self, store: consumerfakes.FakeStore, keys: Keys, key: str, fences: list[str]
    ) -> None:
        super().__init__(store, "pod-a")
        self.keys, self.key, self.fences = keys, key, fences

    def _check(self) -> None:
        if self.key not in self.keys.accepted:
            raise errors.ConfigurationError("checkpoint store: AuthenticationFailed")

    async def fence(self, partition: str, epoch: int, *, start: Any) -> Any:
        self.fences.append(partition)
        self._check()
        return await super().fence(partition, epoch, start=start)

    async def update(self, partition: str, *, offset: str, sequence_number: int) -> Any:
        self._check()
        return await super().update(partition, offset=offset, sequence_number=sequence_number)


class Services:
    """Event Hubs and the storage account behind one pod, and the clients the pod opened."""

    def __init__(self, hub: consumerfakes.FakeHub, store: consumerfakes.FakeStore) -> None:
        self.hub, self.store = hub, store
        self.eventhub_keys = Keys("one")
        self.blob_keys = Keys("one")
        #: (Event Hubs key, storage key) of every opening of the pod's clients, in order.
        self.opened: list[tuple[str, str]] = []
        #: (Event Hubs key, storage key) after every swap under open clients, in order.
        self.renewed: list[tuple[str, str]] = []
        #: The partition of every fence, in order.
        self.fences: list[str] = []
        #: Set: a swap under open clients fails (the pod must open new ones instead).
        self.refuse_swaps = False
        #: Set: a start's check of its position with a refused Event Hubs key fails after
        #: this long (the SDK's own retries of a management call); an accepted key answers.
        self.refused_check_s: float | None = None

    def backends(self, credentials: connections.Credentials) -> connections.BackendFactory:
        @contextlib.asynccontextmanager
        async def factory(assignment: assignments.Assignment) -> AsyncIterator[connections.Backend]:
            eventhub = key_of(credentials.eventhub_string())
            store = KeyedStore(
                self.store, self.blob_keys, key_of(credentials.blob_string()), self.fences
            )
            self.opened.append((eventhub, store.key))

            def open_receiver(
                partition: str, epoch: int, position: deliveries.ReceivePosition
            ) -> consumerfakes.FakeReceiver:
                receiver = RefusingReceiver(
                    self.eventhub_keys, eventhub, self.hub, partition, epoch, position
                )
                self.hub.receivers.append(receiver)
                return receiver

            async def renew(*, eventhub_string: bool, blob_string: bool) -> None:
                """As `connections.AzureBackends` does: the store's requests and the links
                opened from now on use the new key."""
                nonlocal eventhub
                if self.refuse_swaps:
                    raise errors.CheckpointStoreUnreachable("checkpoint store: timed out")
                if eventhub_string:
                    eventhub = key_of(credentials.eventhub_string())
                if blob_string:
                    store.key = key_of(credentials.blob_string())
                self.renewed.append((eventhub, store.key))

            async def check_position(partition: str, checkpoint: Any) -> None:
                used = eventhub  # the read's client holds the key it was made with
                if self.refused_check_s is not None and used not in self.eventhub_keys.accepted:
                    await asyncio.sleep(self.refused_check_s)
                    raise errors.EventHubUnreachable(
                        f"partition {partition}: cannot read its properties: ConnectError"
                    )

            yield connections.Backend(
                store=store,
                open_receiver=open_receiver,
                resolve_start=consumerfakes.resolve_nothing,
                check_position=check_position,
                renew=renew,
            )

        return factory

    def regenerate_eventhub_key(self, old: str, new: str) -> None:
        """The old key is refused from now on: open links with it drop."""
        self.eventhub_keys.accepted = {new}
        for receiver in self.hub.receivers:
            if isinstance(receiver, RefusingReceiver) and receiver.key == old:
                receiver.buffer.fail(
                    errors.EventHubAuthenticationFailed("Unauthorized: key refused")
                )


def secret_files(tmp_path: Path) -> tuple[Path, Path, connections.Credentials]:
    """Both connection strings in files, as the consumer chart mounts them."""
    eventhub, blob = tmp_path / "eventhub", tmp_path / "blob"
    eventhub.write_text(eventhub_string("one") + "\n")
    blob.write_text(blob_string("one"))
    credentials = settings.credentials_from(
        {
            "EHB_EVENTHUB_CONNECTION_STRING_FILE": str(eventhub),
            "EHB_BLOB_CONNECTION_STRING_FILE": str(blob),
        }
    )
    return eventhub, blob, credentials


@contextlib.asynccontextmanager
async def pod(
    services: Services,
    credentials: connections.Credentials,
    processor: processing.BatchProcessor,
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    """A pod running `processor` (a plain handler's recorder, or Spark's triggers) over the
    fakes, its credentials read from the files."""
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a", batch=test_runtime.FAST),
        source=source,
        backends=services.backends(credentials),
        processor=processor,
        secret_files=credentials.files,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(30):
            await task


async def three_events_each(
    source: assignments.MemorySource,
    hub: consumerfakes.FakeHub,
    recorder: consumerfakes.Recorder,
) -> None:
    """Both partitions assigned, and three events of each processed."""
    source.put(consumerfakes.configmap(1, PARTITIONS))
    for partition in PARTITIONS:
        hub.append(partition, 3)
    await consumerfakes.eventually(lambda: len(recorder.done) == 6, what="processing")


def processed(recorder: consumerfakes.Recorder, partition: str) -> int:
    return sum(1 for p, _ in recorder.done if p == partition)


async def test_a_rotated_eventhub_key_is_taken_from_the_file_and_the_partitions_recover(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    services = Services(fake_hub, fake_store)
    eventhub_file, _, credentials = secret_files(tmp_path)
    recorder = consumerfakes.Recorder()
    async with pod(services, credentials, recorder) as (_, source):
        await three_events_each(source, fake_hub, recorder)

        # The old key is regenerated before the pod sees the new one: every partition fails.
        services.regenerate_eventhub_key("one", "two")
        for partition in PARTITIONS:
            fake_hub.append(partition, 2)
        await consumerfakes.eventually(
            lambda: (
                set(source.reports) == set(PARTITIONS)
                and all("key refused" in r.error for r in source.reports.values())
            ),
            what="every partition reported failing with the refusal",
        )
        await asyncio.sleep(60)
        assert len(recorder.done) == 6
        assert services.opened == [("one", "one")]

        # The kubelet writes the Secret's new value into the file.
        eventhub_file.write_text(eventhub_string("two") + "\n")
        await consumerfakes.eventually(
            lambda: len(recorder.done) == 10,
            within=secretfiles.CHECK_INTERVAL_S + 2,
            what="the partitions processing again with the new key",
        )
        await consumerfakes.eventually(lambda: not source.reports, what="the reports cleared")
        assert services.opened == [("one", "one")]
        assert services.renewed == [("two", "one")]
        # Nothing was handled twice: each partition resumed after its checkpoint.
        assert sorted(recorder.done) == sorted({(p, n) for p in PARTITIONS for n in range(5)})


async def test_a_read_made_with_the_replaced_key_fails_as_no_failure_of_the_new_one(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Secret pointed at a wrong endpoint, then put right: the partitions were restarting,
    each start's read of its bounds in flight with the wrong value, and those reads failed
    just after the switch. Every partition was reported failing again (a `PartitionFailing`
    Event after the `PartitionRecovered` one) and waited out a backoff."""
    caplog.set_level(logging.INFO, logger=restarts.__name__)
    services = Services(fake_hub, fake_store)
    services.refused_check_s = 20.0
    eventhub_file, _, credentials = secret_files(tmp_path)
    recorder = consumerfakes.Recorder()
    async with pod(services, credentials, recorder) as (_, source):
        await three_events_each(source, fake_hub, recorder)
        eventhub_file.write_text(eventhub_string("wrong") + "\n")
        await consumerfakes.eventually(
            lambda: set(source.reports) == set(PARTITIONS), what="every partition failing"
        )
        await asyncio.sleep(30)  # restarting: each start's check in flight for 20 s
        eventhub_file.write_text(eventhub_string("one") + "\n")
        await consumerfakes.eventually(
            lambda: len(services.renewed) == 2, within=secretfiles.CHECK_INTERVAL_S + 1
        )
        switched = consumerfakes.loop_time()
        for partition in PARTITIONS:
            fake_hub.append(partition, 2)
        said: set[str] = set()
        while len(recorder.done) < 10:
            assert consumerfakes.loop_time() - switched < 25, "not processing again"
            said |= {r.state for r in source.reports.values()}
            await asyncio.sleep(0.1)
    stale = [r.args for r in caplog.records if r.msg == restarts.STALE]
    assert {args[0] for args in stale if args} == set(PARTITIONS)
    assert not said  # no partition reported failing after the switch
    assert consumerfakes.loop_time() - switched <= 21  # the check's 20 s, no backoff after


@dataclasses.dataclass
class Rotation(Generic[P]):
    """What a pod under load did around a rewrite of one credential file."""

    source: assignments.MemorySource
    processor: P
    #: Loop time of the rewrite.
    rotated_at: float
    #: The pod's workers just before the rewrite, and just before the pod was stopped.
    before: dict[str, partitions.PartitionWorker]
    after: dict[str, partitions.PartitionWorker]


async def feed(services: Services, rounds: int) -> None:
    """One event into each partition every 0.2 s, `rounds` times."""
    for _ in range(rounds):
        for partition in PARTITIONS:
            services.hub.append(partition, 1)
        await asyncio.sleep(0.2)


async def rotate_under_load(
    services: Services,
    credentials: connections.Credentials,
    processor: P,
    rewrite: Callable[[], object],
    regenerate: Callable[[], object],
) -> Rotation[P]:
    """Events every 0.2 s into both partitions (100 each); at 5 s the file is rewritten (both
    keys work), at 15 s the old key is regenerated; at 25 s the pod is stopped."""
    async with pod(services, credentials, processor) as (consumer, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        feeder = asyncio.create_task(feed(services, 100))
        await asyncio.sleep(5)
        before = dict(consumer.workers)
        rotated_at = consumerfakes.loop_time()
        rewrite()
        await asyncio.sleep(10)
        regenerate()
        await feeder
        await asyncio.sleep(5)
        after = dict(consumer.workers)
    return Rotation(source, processor, rotated_at, before, after)


def slow_recorder() -> consumerfakes.Recorder:
    """A handler taking 1 s a batch."""
    recorder = consumerfakes.Recorder()
    recorder.duration = 1.0
    return recorder


def assert_nothing_moved(services: Services, rotation: Rotation[consumerfakes.Recorder]) -> None:
    """Same workers, fenced once, never released before the shutdown; no handler call waited
    for the switch; every event handled once, and the checkpoints at the last one."""
    assert set(rotation.before) == set(PARTITIONS)
    assert rotation.after == rotation.before  # the same worker objects
    assert all(w.path[:3] == ["fencing", "running", "releasing"] for w in rotation.after.values())
    assert services.fences == list(PARTITIONS)  # the first fences only
    assert services.opened == [("one", "one")]
    starts = [t for t, _ in rotation.processor.starts if t >= rotation.rotated_at - 2]
    # The handler's second and the batch's wait, as before the rotation.
    assert (
        max(b - a for a, b in itertools.pairwise(starts)) <= 1.0 + test_runtime.FAST.max_wait + 0.01
    )
    done = rotation.processor.done
    assert sorted(done) == sorted((p, n) for p in PARTITIONS for n in range(100))
    assert {p: c.sequence_number for p, c in services.store.blobs.items()} == {"0": 99, "1": 99}


async def test_a_new_storage_key_swaps_the_checkpoint_client_under_the_running_partitions(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """The recommended order (new key in the file, then the old one regenerated): the
    partitions are neither released nor fenced again, and every checkpoint after the switch
    is written with the new key (the old one is refused ten seconds later)."""
    services = Services(fake_hub, fake_store)
    services.blob_keys.accepted = {"one", "two"}
    _, blob_file, credentials = secret_files(tmp_path)

    def regenerate() -> None:
        services.blob_keys.accepted = {"two"}

    rotation = await rotate_under_load(
        services,
        credentials,
        slow_recorder(),
        lambda: blob_file.write_text(blob_string("two")),
        regenerate,
    )
    assert_nothing_moved(services, rotation)
    assert services.renewed == [("one", "two")]
    assert not rotation.source.reports


async def test_a_new_eventhub_key_reopens_the_links_at_the_same_epoch_without_a_release(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """The links are opened again with the new key after the last event handed to the
    handler, with the same owner level: no release, no fence, nothing handled twice."""
    services = Services(fake_hub, fake_store)
    services.eventhub_keys.accepted = {"one", "two"}
    eventhub_file, _, credentials = secret_files(tmp_path)
    rotation = await rotate_under_load(
        services,
        credentials,
        slow_recorder(),
        lambda: eventhub_file.write_text(eventhub_string("two")),
        lambda: services.regenerate_eventhub_key("one", "two"),
    )
    assert_nothing_moved(services, rotation)
    assert services.renewed == [("two", "one")]
    assert not rotation.source.reports
    links = [r for r in fake_hub.receivers if isinstance(r, RefusingReceiver)]
    assert sorted((r.partition, r.key, r.epoch) for r in links) == [
        ("0", "one", 1),
        ("0", "two", 1),
        ("1", "one", 1),
        ("1", "two", 1),
    ]


async def test_clients_that_cannot_swap_the_new_key_are_opened_again_with_it(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """A swap that fails (the new key's client cannot be built) falls back to what a change
    of coordinates does: every partition released into the old clients, new ones opened."""
    services = Services(fake_hub, fake_store)
    services.blob_keys.accepted = {"one", "two"}
    services.refuse_swaps = True
    _, blob_file, credentials = secret_files(tmp_path)
    recorder = consumerfakes.Recorder()
    async with pod(services, credentials, recorder) as (consumer, source):
        await three_events_each(source, fake_hub, recorder)
        blob_file.write_text(blob_string("two"))
        await consumerfakes.eventually(
            lambda: len(services.opened) == 2 and set(consumer.owned()) == set(PARTITIONS),
            within=secretfiles.CHECK_INTERVAL_S + 2,
            what="new clients opened and the partitions running again",
        )
        assert services.opened == [("one", "one"), ("one", "two")]
        assert services.fences == ["0", "1", "0", "1"]
        services.blob_keys.accepted = {"two"}
        for partition in PARTITIONS:
            fake_hub.append(partition, 2)
        await consumerfakes.eventually(lambda: len(recorder.done) == 10, what="processing")
        assert not source.reports
    assert sorted(recorder.done) == sorted({(p, n) for p in PARTITIONS for n in range(5)})


async def test_an_unchanged_file_reopens_nothing_however_long_the_key_is_refused(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    services = Services(fake_hub, fake_store)
    services.eventhub_keys.accepted = {"two"}  # regenerated before the pod started
    eventhub_file, _, credentials = secret_files(tmp_path)
    recorder = consumerfakes.Recorder()
    async with pod(services, credentials, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        await consumerfakes.eventually(
            lambda: set(source.reports) == set(PARTITIONS), what="the partitions reported"
        )
        # The kubelet rewrites the file with what it holds (a sync of another key, say).
        eventhub_file.write_text(eventhub_string("one") + "\n")
        await asyncio.sleep(300)
        assert services.opened == [("one", "one")]
        # The refused links are paced by the restart backoff (1, 2, 4 ... 30 s), not by the
        # file's checks: about 14 each in 300 s.
        links = [sum(1 for r in fake_hub.receivers if r.partition == p) for p in PARTITIONS]
        assert max(links) <= 300 / restarts.RESTART_BACKOFF_MAX_S + 6
        assert {r.state for r in source.reports.values()} == {"failing"}


async def test_garbage_in_the_file_is_reported_and_the_clients_in_use_are_kept(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    services = Services(fake_hub, fake_store)
    eventhub_file, _, credentials = secret_files(tmp_path)
    recorder = consumerfakes.Recorder()
    async with pod(services, credentials, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        for partition in PARTITIONS:
            fake_hub.append(partition, 1)
        await consumerfakes.eventually(lambda: len(recorder.done) == 2, what="processing")

        # Someone pastes the key alone into the Secret, and regenerates the old one.
        eventhub_file.write_text("SharedAccessKey=pasted-secret-value")
        services.regenerate_eventhub_key("one", "two")
        await consumerfakes.eventually(
            lambda: (
                set(source.reports) == set(PARTITIONS)
                and all(
                    r.error.startswith("EHB_EVENTHUB_CONNECTION_STRING_FILE")
                    for r in source.reports.values()
                )
            ),
            within=secretfiles.CHECK_INTERVAL_S + 5,
            what="the reports saying what to fix in the file",
        )
        (report, *_) = source.reports.values()
        assert report.error.startswith(
            f"EHB_EVENTHUB_CONNECTION_STRING_FILE ({eventhub_file}): has no Endpoint"
        )
        await asyncio.sleep(60)
        assert services.opened == [("one", "one")]  # not dropped for garbage
        refusals = [r for r in caplog.records if "has no Endpoint" in r.getMessage()]
        assert len(refusals) == 1  # said once per content, not at every check

        eventhub_file.write_text(eventhub_string("two"))
        for partition in PARTITIONS:
            fake_hub.append(partition, 1)
        await consumerfakes.eventually(
            lambda: len(recorder.done) == 4,
            within=secretfiles.CHECK_INTERVAL_S + 2,
            what="processing with the fixed file",
        )
        await consumerfakes.eventually(lambda: not source.reports, what="the reports cleared")
    assert services.opened == [("one", "one")]
    assert services.renewed == [("two", "one")]
    assert "pasted-secret-value" not in caplog.text
    assert "SharedAccessKey=two" not in caplog.text
