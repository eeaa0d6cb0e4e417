"""A storage key rotated under a running pod, against Azurite and the Event Hubs emulator: the
pod reads its checkpoint store's connection string from a file (``EHB_BLOB_CONNECTION_STRING_FILE``,
as the consumer chart mounts it); the account's key is regenerated (Azurite started again on
the same data with the other key only), the pod's checkpoints stop, and once the file holds
the new key they resume in the same process, without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import blobs, checkpointing
from eventhub_balancer.consumer import assignments, connections, partitions, runtime, settings
from eventhub_balancer.contracts import endpoints
from eventhub_balancer_devstack import azurite as azurite_launcher
from tests.support.consumerfakes import Recorder, configmap, eventually
from tests.support.fixtures.consumer import send_events

BATCH = partitions.BatchSettings(batch_size=100, max_wait=0.1, retry_backoff=0.05)
ACCOUNT = azurite_launcher.ACCOUNT_NAME
#: Two keys of the test's own account (Azurite takes any base64 key from AZURITE_ACCOUNTS).
FIRST_KEY = base64.b64encode(
    b"the first key of the rotation test account, 64 bytes long....."
).decode()
SECOND_KEY = base64.b64encode(
    b"the second key of the rotation test account, 64 bytes long...."
).decode()
CONTAINER = "checkpoints"


def blob_string(port: int, key: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )


def storage(location: Path, key: str, port: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Azurite on ``location``'s data, taking only ``key`` for the account."""
    monkeypatch.setenv("AZURITE_ACCOUNTS", f"{ACCOUNT}:{key}")
    return azurite_launcher.Azurite(location=location, port=port).start()


async def checkpoints(port: int, key: str = SECOND_KEY) -> dict[str, int]:
    """{partition: sequence number} of the stored checkpoints, read with ``key``."""
    async with blobs.open_container(
        container_name=CONTAINER, connection_string=blob_string(port, key)
    ) as container:
        store = checkpointing.CheckpointStore(
            container,
            fully_qualified_namespace="local.servicebus.windows.net",  # the assignment's
            eventhub_name="orders",
            consumer_group="$Default",
            owner_id="reader",
        )
        found = {p: await store.read(p) for p in ("0", "1")}
    return {p: c.sequence_number for p, c in found.items() if c is not None}


@contextlib.asynccontextmanager
async def pod(
    credentials: connections.Credentials, recorder: Recorder
) -> AsyncIterator[assignments.MemorySource]:
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders", pod="pod-a", batch=BATCH, shutdown_timeout=10
        ),
        source=source,
        backends=connections.AzureBackends(credentials=credentials, owner_id="pod-a", batch=BATCH),
        processor=recorder,
        secret_files=credentials.files,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield source
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(20):
            await task


@dataclasses.dataclass
class Rotation:
    """A pod running on Azurite's ``data`` with its storage connection string in ``blob_file``,
    both partitions checkpointed at 4 with the first key."""

    data: Path
    service: Any
    port: int
    blob_file: Path
    eventhub: str
    source: assignments.MemorySource
    recorder: Recorder

    def regenerate(self, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """The account takes ``key`` only from now on (Azurite started again on its data)."""
        self.service.stop()
        self.service = storage(self.data, key, self.port, monkeypatch)


@contextlib.asynccontextmanager
async def rotation(
    consumer_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, keys: str
) -> AsyncIterator[Rotation]:
    """A pod reading its storage key from a file, on an account that takes ``keys``."""
    data = tmp_path / "azurite"
    service = storage(data, keys, 0, monkeypatch)
    port = service.port
    try:
        async with blobs.open_container(
            container_name=CONTAINER, connection_string=blob_string(port, FIRST_KEY)
        ) as container:
            await blobs.ensure_container(container)
        blob_file = tmp_path / "connection-string"
        blob_file.write_text(blob_string(port, FIRST_KEY))
        eventhub = consumer_emulator.connection_string()
        credentials = settings.credentials_from(
            {
                "EHB_EVENTHUB_CONNECTION_STRING": eventhub,
                "EHB_BLOB_CONNECTION_STRING_FILE": str(blob_file),
            },
            policy=endpoints.EndpointPolicy(allow_development=True),
        )
        await send_events(eventhub, "orders", {"0": 5, "1": 5})
        recorder = Recorder()
        async with pod(credentials, recorder) as source:
            source.put(
                configmap(
                    1,
                    {"0": (1, "owned"), "1": (1, "owned")},
                    checkpointContainer=CONTAINER,
                    startPosition=json.dumps("earliest"),
                )
            )
            # A batch is handed to the processor before its checkpoint is written: the key is
            # rotated only once both checkpoints stand, or the last one would meet the new key.
            deadline = asyncio.get_running_loop().time() + 30
            while await checkpoints(port, FIRST_KEY) != {"0": 4, "1": 4}:
                assert asyncio.get_running_loop().time() < deadline, "no first checkpoints"
                await asyncio.sleep(0.2)
            held = Rotation(data, service, port, blob_file, eventhub, source, recorder)
            try:
                yield held
            finally:
                service = held.service
    finally:
        service.stop()


async def test_the_pods_checkpoints_resume_once_the_file_holds_the_new_key(
    consumer_emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with rotation(consumer_emulator, tmp_path, monkeypatch, keys=FIRST_KEY) as pod_:
        port, source = pod_.port, pod_.source
        # The first key is regenerated: the account takes the second one only.
        pod_.regenerate(SECOND_KEY, monkeypatch)
        assert await checkpoints(port) == {"0": 4, "1": 4}
        await send_events(pod_.eventhub, "orders", {"0": 3, "1": 3})
        await eventually(lambda: set(source.reports) == {"0", "1"}, within=60, what="both reported")
        await asyncio.sleep(5)
        assert await checkpoints(port) == {"0": 4, "1": 4}

        # The kubelet writes the Secret's new value into the file.
        pod_.blob_file.write_text(blob_string(port, SECOND_KEY))
        deadline = asyncio.get_running_loop().time() + 40
        while await checkpoints(port) != {"0": 7, "1": 7}:
            assert asyncio.get_running_loop().time() < deadline, "checkpoints did not resume"
            await asyncio.sleep(0.5)
        await eventually(lambda: not source.reports, within=10, what="the reports cleared")
    assert {(p, n) for p, n in pod_.recorder.done} == {(p, n) for p in "01" for n in range(8)}
    assert FIRST_KEY not in caplog.text
    assert SECOND_KEY not in caplog.text


async def test_a_new_key_in_the_file_is_swapped_in_without_moving_a_partition(
    consumer_emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The recommended order: the second key in the file while both work, then the first
    regenerated. The pod's partitions stay fenced where they were (no release, no second
    fence) and its checkpoints go on with the second key."""
    caplog.set_level(logging.INFO)
    both = f"{FIRST_KEY}:{SECOND_KEY}"
    async with rotation(consumer_emulator, tmp_path, monkeypatch, keys=both) as pod_:
        port, source = pod_.port, pod_.source
        pod_.blob_file.write_text(blob_string(port, SECOND_KEY))
        await eventually(
            lambda: "holds a new connection string" in caplog.text,
            within=10,
            what="the second key read",
        )
        await asyncio.sleep(1)  # a few of the pod's turns: the switch is made in one
        # The first key is regenerated: the account takes the second one only.
        pod_.regenerate(SECOND_KEY, monkeypatch)
        await send_events(pod_.eventhub, "orders", {"0": 3, "1": 3})
        deadline = asyncio.get_running_loop().time() + 20
        while await checkpoints(port) != {"0": 7, "1": 7}:
            assert asyncio.get_running_loop().time() < deadline, "checkpoints stopped"
            await asyncio.sleep(0.2)
        assert not source.reports
        assert source.released == {}
    fences = [r for r in caplog.records if "fenced with epoch" in r.getMessage()]
    assert len(fences) == 2  # one per partition, at the start
    assert sorted(pod_.recorder.done) == [(p, n) for p in "01" for n in range(8)]
    assert FIRST_KEY not in caplog.text
    assert SECOND_KEY not in caplog.text
