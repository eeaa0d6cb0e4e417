"""A key rotated under a running pod whose connection strings come from files (a mounted
Secret, ``EHB_*_CONNECTION_STRING_FILE``): the pod reads the new value when the kubelet
rewrites the file, replaces its clients, and its failing partitions recover without a
restart; an unchanged file reopens nothing; garbage in the file is refused with what to fix,
and the clients that may still work are kept.

Over the in-memory fakes, on fake loop time: the fakes take only the keys they accept, as
Event Hubs and Blob Storage do once the old key is regenerated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import (
    assignments,
    connections,
    restarts,
    runtime,
    secretfiles,
    settings,
)
from tests.consumer import test_runtime
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

PARTITIONS = {"0": (1, "owned"), "1": (1, "owned")}


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

    def __init__(self, store: consumerfakes.FakeStore, keys: Keys, key: str) -> None:
        super().__init__(store, "pod-a")
        self.keys, self.key = keys, key

    def _check(self) -> None:
        if self.key not in self.keys.accepted:
            raise errors.ConfigurationError("checkpoint store: AuthenticationFailed")

    async def fence(self, partition: str, epoch: int, *, start: Any) -> Any:
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

    def backends(self, credentials: connections.Credentials) -> connections.BackendFactory:
        @contextlib.asynccontextmanager
        async def factory(assignment: assignments.Assignment) -> AsyncIterator[connections.Backend]:
            eventhub = key_of(credentials.eventhub_string())
            blob = key_of(credentials.blob_string())
            self.opened.append((eventhub, blob))

            def open_receiver(
                partition: str, epoch: int, position: deliveries.ReceivePosition
            ) -> consumerfakes.FakeReceiver:
                receiver = RefusingReceiver(
                    self.eventhub_keys, eventhub, self.hub, partition, epoch, position
                )
                self.hub.receivers.append(receiver)
                return receiver

            yield connections.Backend(
                store=KeyedStore(self.store, self.blob_keys, blob),
                open_receiver=open_receiver,
                resolve_start=consumerfakes.resolve_nothing,
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
    services: Services, credentials: connections.Credentials, recorder: consumerfakes.Recorder
) -> AsyncIterator[tuple[runtime.Runtime, assignments.MemorySource]]:
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a", batch=test_runtime.FAST),
        source=source,
        backends=services.backends(credentials),
        processor=recorder,
        secret_files=credentials.files,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer, source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(30):
            await task


def processed(recorder: consumerfakes.Recorder, partition: str) -> int:
    return sum(1 for p, _ in recorder.done if p == partition)


async def test_a_rotated_eventhub_key_is_taken_from_the_file_and_the_partitions_recover(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    services = Services(fake_hub, fake_store)
    eventhub_file, _, credentials = secret_files(tmp_path)
    recorder = consumerfakes.Recorder()
    async with pod(services, credentials, recorder) as (_, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        for partition in PARTITIONS:
            fake_hub.append(partition, 3)
        await consumerfakes.eventually(lambda: len(recorder.done) == 6, what="processing")

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
        assert services.opened == [("one", "one"), ("two", "one")]
        # Nothing was handled twice: each partition resumed after its checkpoint.
        assert sorted(recorder.done) == sorted({(p, n) for p in PARTITIONS for n in range(5)})


async def test_a_new_key_in_the_file_before_the_old_is_regenerated_moves_no_partition(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """The recommended order: both keys work while the pod switches; its partitions are
    released into the old clients (final checkpoint) and taken up on the new ones, at the
    same epoch, with nothing handed to another pod and nothing handled twice."""
    services = Services(fake_hub, fake_store)
    services.eventhub_keys.accepted = {"one", "two"}
    _, blob_file, credentials = secret_files(tmp_path)
    services.blob_keys.accepted = {"one", "two"}
    recorder = consumerfakes.Recorder()
    async with pod(services, credentials, recorder) as (consumer, source):
        source.put(consumerfakes.configmap(1, PARTITIONS))
        for partition in PARTITIONS:
            fake_hub.append(partition, 3)
        await consumerfakes.eventually(lambda: len(recorder.done) == 6, what="processing")
        blob_file.write_text(blob_string("two"))
        await consumerfakes.eventually(
            lambda: len(services.opened) == 2 and set(consumer.owned()) == set(PARTITIONS),
            within=secretfiles.CHECK_INTERVAL_S + 2,
            what="the clients replaced and the partitions running again",
        )
        assert services.opened[-1] == ("one", "two")
        services.blob_keys.accepted = {"two"}  # the old storage key regenerated
        for partition in PARTITIONS:
            fake_hub.append(partition, 2)
        await consumerfakes.eventually(lambda: len(recorder.done) == 10, what="processing")
        assert not source.reports
        assert consumer.owned() == {"0": 1, "1": 1}
        assert source.released == {}  # nothing the operator would hand to another pod
    assert sorted(recorder.done) == sorted({(p, n) for p in PARTITIONS for n in range(5)})
    assert {p: c.sequence_number for p, c in fake_store.blobs.items()} == {"0": 4, "1": 4}


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
    assert services.opened == [("one", "one"), ("two", "one")]
    assert "pasted-secret-value" not in caplog.text
    assert "SharedAccessKey=two" not in caplog.text
