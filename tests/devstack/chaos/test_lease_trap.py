"""The fault proxy's lease trap: a writer killed mid-fence leaves its checkpoint lease held."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from eventhub_balancer_devstack import azurite as azurite_launcher
from eventhub_balancer_devstack import faultproxy

BLOB = "demo.servicebus.windows.net/chaos/$default/checkpoint/3"


@pytest.mark.timeout(60)
def test_the_trap_takes_the_lease_and_never_answers(azurite: azurite_launcher.Azurite) -> None:
    from azure.storage.blob import BlobServiceClient

    direct = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = direct.get_container_client(f"trap-{uuid.uuid4().hex[:12]}")
    container.create_container()
    container.upload_blob(BLOB, b"")
    with faultproxy.FaultProxy(azurite.port) as proxy:
        proxied = BlobServiceClient.from_connection_string(
            azurite_launcher.connection_string(host=proxy.host, port=proxy.port),
            retry_total=0,
        )
        blob = proxied.get_blob_client(container.container_name, BLOB)
        proxy.faults.arm_lease_trap()
        outcome: list[object] = []

        def acquire() -> None:
            try:
                outcome.append(blob.acquire_lease(lease_duration=15))
            except Exception as e:  # the answer is dropped: the writer never gets its lease
                outcome.append(e)

        writer = threading.Thread(target=acquire, daemon=True)
        writer.start()
        deadline = time.monotonic() + 10
        while proxy.faults.lease_trapped() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        trapped = proxy.faults.lease_trapped()
        assert trapped is not None
        assert trapped.endswith("/checkpoint/3")
        writer.join(timeout=0.3)
        assert outcome == [], "the answer came before the trap was released"
        held = direct.get_blob_client(container.container_name, BLOB).get_blob_properties()
        assert held.lease.state == "leased", outcome
        proxy.faults.release_lease_trap()
        writer.join(timeout=10)
        assert len(outcome) == 1
        assert isinstance(outcome[0], Exception)
    properties = direct.get_blob_client(container.container_name, BLOB).get_blob_properties()
    assert properties.lease.state == "leased"
    container.delete_container()


@pytest.mark.timeout(60)
def test_an_armed_trap_ignores_other_requests(azurite: azurite_launcher.Azurite) -> None:
    from azure.storage.blob import BlobServiceClient

    with faultproxy.FaultProxy(azurite.port) as proxy:
        proxy.faults.arm_lease_trap()
        client = BlobServiceClient.from_connection_string(
            azurite_launcher.connection_string(host=proxy.host, port=proxy.port)
        )
        container = client.get_container_client(f"trap-{uuid.uuid4().hex[:12]}")
        container.create_container()
        container.upload_blob("elsewhere/0", b"")
        lease = container.get_blob_client("elsewhere/0").acquire_lease(lease_duration=15)
        lease.release()
        assert proxy.faults.lease_trapped() is None
        proxy.faults.clear()
        container.delete_container()


@pytest.mark.timeout(60)
def test_an_armed_trap_refuses_an_unleased_fence_so_that_it_takes_the_lease(
    azurite: azurite_launcher.Azurite,
) -> None:
    # A fence writes without a lease first; the trap makes that write lose, as a race would, so
    # that the fencer reads again and takes the lease the trap catches. An owner's checkpoint,
    # at the epoch the blob has, is never refused.
    from azure.core import MatchConditions
    from azure.core.exceptions import ResourceModifiedError
    from azure.storage.blob import BlobServiceClient

    direct = BlobServiceClient.from_connection_string(azurite.connection_string)
    container = direct.get_container_client(f"trap-{uuid.uuid4().hex[:12]}")
    container.create_container()
    with faultproxy.FaultProxy(azurite.port) as proxy:
        proxied = BlobServiceClient.from_connection_string(
            azurite_launcher.connection_string(host=proxy.host, port=proxy.port),
            retry_total=0,
        )
        blob = proxied.get_blob_client(container.container_name, BLOB)
        blob.upload_blob(b"", metadata={"epoch": "3", "sequencenumber": "1"})

        def write(epoch: int, sequence: int) -> None:
            etag = blob.get_blob_properties().etag
            blob.set_blob_metadata(
                {"epoch": str(epoch), "sequencenumber": str(sequence)},
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )

        proxy.faults.arm_lease_trap()
        write(3, 2)  # the owner's checkpoint, at its epoch
        with pytest.raises(ResourceModifiedError):
            write(4, 2)  # a fence, unleased: refused while the trap is armed
        assert proxy.faults.lease_trapped() is None  # the trap waits for the lease
        proxy.faults.release_lease_trap()
        write(4, 3)  # disarmed: an unleased fence goes through
    stored = direct.get_blob_client(container.container_name, BLOB).get_blob_properties()
    assert (stored.metadata["epoch"], stored.metadata["sequencenumber"]) == ("4", "3")
    container.delete_container()
