"""A dead letter written after a storage key was swapped in (`connections.AzureBackends`'s
``renew``), against Azurite started again on the same data with the new key only: the
dead-letter writer holds the checkpoint container's client too, and must write with the new
key, in plain mode as in Spark mode (both use the pod's one backend). No Event Hubs needed:
the writer and the swap only talk to the storage account.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs, deliveries
from eventhub_balancer.consumer import assignments, connections, partitions, settings
from eventhub_balancer.contracts import endpoints
from tests.consumer.wire.test_rotated_storage_key import (
    CONTAINER,
    FIRST_KEY,
    SECOND_KEY,
    blob_string,
    storage,
)
from tests.support import consumerfakes

EVENTHUB = (
    "Endpoint=sb://localhost;SharedAccessKeyName=app;SharedAccessKey=unused;"
    "UseDevelopmentEmulator=true"
)
EVENTS = [
    deliveries.ReceivedEvent(
        partition="0",
        sequence_number=0,
        offset="0",
        enqueued_time=consumerfakes.T0,
        partition_key=None,
        properties={},
        body=b"poison",
    )
]


@pytest.mark.parametrize("swapped", [True, False], ids=["swapped", "not-swapped"])
async def test_a_dead_letter_after_the_swap_is_written_with_the_new_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped: bool
) -> None:
    """Swapped: written once the first key is regenerated. Not swapped (the control): the
    same write with the first key is refused, so the write above did use the second one."""
    data = tmp_path / "azurite"
    service = storage(data, f"{FIRST_KEY}:{SECOND_KEY}", 0, monkeypatch)
    port = service.port
    try:
        async with blobs.open_container(
            container_name=CONTAINER, connection_string=blob_string(port, FIRST_KEY)
        ) as container:
            await blobs.ensure_container(container)
        blob_file = tmp_path / "connection-string"
        blob_file.write_text(blob_string(port, FIRST_KEY))
        credentials = settings.credentials_from(
            {
                "EHB_EVENTHUB_CONNECTION_STRING": EVENTHUB,
                "EHB_BLOB_CONNECTION_STRING_FILE": str(blob_file),
            },
            policy=endpoints.EndpointPolicy(allow_development=True),
        )
        assert credentials.files is not None
        backends = connections.AzureBackends(
            credentials=credentials, owner_id="pod-a", batch=partitions.BatchSettings()
        )
        assignment = assignments.from_configmap(
            consumerfakes.configmap(1, {"0": (1, "owned")}, checkpointContainer=CONTAINER)
        )
        async with backends(assignment) as backend:
            assert backend.renew is not None
            assert backend.dead_letters is not None
            blob_file.write_text(blob_string(port, SECOND_KEY))
            credentials.files.refresh()
            if swapped:
                await backend.renew(eventhub_string=False, blob_string=True)
            # The first key is regenerated: the account takes the second one only.
            service.stop()
            service = storage(data, SECOND_KEY, port, monkeypatch)
            write = backend.dead_letters.write(
                EVENTS, error="poison", attempts=3, pod="pod-a", epoch=1
            )
            if swapped:
                assert (await write).endswith("/deadletter/0/0-0.json")
            else:
                with pytest.raises(errors.ConfigurationError, match="403"):
                    await write
    finally:
        service.stop()
