"""The owner-checked checkpoint store on Azurite: fence, read, update, list, seed."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing as cp
from eventhub_balancer.adapters import retrying
from eventhub_balancer.contracts import checkpointblobs, startpositions

NAMESPACE = "Shop.servicebus.windows.net"
HUB = "Orders"
GROUP = "$Default"


def store(container: Any, owner: str) -> cp.CheckpointStore:
    return cp.CheckpointStore(
        container,
        fully_qualified_namespace=NAMESPACE,
        eventhub_name=HUB,
        consumer_group=GROUP,
        owner_id=owner,
        retry=retrying.RetryPolicy(seed=1),
    )


async def metadata(container: Any, partition: str) -> dict[str, str]:
    name = f"shop.servicebus.windows.net/orders/$default/checkpoint/{partition}"
    props = await container.get_blob_client(name).get_blob_properties()
    return dict(props.metadata)


async def test_fence_creates_a_missing_checkpoint_at_the_start_position(
    blob_container: Any,
) -> None:
    a = store(blob_container, "pod-a")
    taken = await a.fence("0", 1, start=startpositions.EARLIEST)
    assert (taken.sequence_number, taken.offset, taken.owner_id, taken.epoch) == (
        -1,
        "-1",
        "pod-a",
        1,
    )
    assert await metadata(blob_container, "0") == {
        "offset": "-1",
        "sequencenumber": "-1",
        "ownerid": "pod-a",
        "epoch": "1",
    }


async def test_fence_seeds_from_a_resolved_position(blob_container: Any) -> None:
    a = store(blob_container, "pod-a")
    taken = await a.fence("0", 1, start=checkpointblobs.Position(offset="5000", sequence_number=49))
    assert (await a.read("0")) == taken
    assert taken.sequence_number == 49


async def test_fence_with_a_higher_epoch_takes_over_and_keeps_the_position(
    blob_container: Any,
) -> None:
    a, b = store(blob_container, "pod-a"), store(blob_container, "pod-b")
    await a.fence("0", 1)
    await a.update("0", offset="700", sequence_number=7)
    taken = await b.fence("0", 2)
    assert (taken.owner_id, taken.epoch, taken.sequence_number, taken.offset) == (
        "pod-b",
        2,
        7,
        "700",
    )


async def test_fence_under_a_higher_epoch_raises_and_leaves_the_blob(blob_container: Any) -> None:
    a, b = store(blob_container, "pod-a"), store(blob_container, "pod-b")
    await b.fence("0", 4)
    before = await metadata(blob_container, "0")
    with pytest.raises(errors.OwnershipLost) as caught:
        await a.fence("0", 3)
    assert (caught.value.our_epoch, caught.value.their_epoch, caught.value.owner) == (3, 4, "pod-b")
    assert await metadata(blob_container, "0") == before
    assert a.owned("0") is None


async def test_fence_again_with_the_same_epoch_is_idempotent(blob_container: Any) -> None:
    a = store(blob_container, "pod-a")
    first = await a.fence("0", 2)
    again = await a.fence("0", 2)
    assert again.etag == first.etag


async def test_fence_refuses_epoch_zero(blob_container: Any) -> None:
    with pytest.raises(errors.InvalidInput, match="epoch"):
        await store(blob_container, "pod-a").fence("0", 0)


async def test_update_moves_forward_and_never_back(blob_container: Any) -> None:
    a = store(blob_container, "pod-a")
    await a.fence("0", 1)
    await a.update("0", offset="100", sequence_number=10)
    kept = await a.update("0", offset="50", sequence_number=5)
    assert (kept.sequence_number, kept.offset) == (10, "100")
    stored = await a.read("0")
    assert stored is not None
    assert (stored.sequence_number, stored.offset) == (10, "100")
    moved = await a.update("0", offset="200", sequence_number=20)
    assert moved.sequence_number == 20
    assert (await metadata(blob_container, "0"))["sequencenumber"] == "20"


async def test_update_without_fence_is_refused(blob_container: Any) -> None:
    with pytest.raises(errors.InvalidInput, match="fence"):
        await store(blob_container, "pod-a").update("0", offset="1", sequence_number=1)


async def test_update_after_a_higher_epoch_fenced_raises_ownership_lost(
    blob_container: Any,
) -> None:
    a, b = store(blob_container, "pod-a"), store(blob_container, "pod-b")
    await a.fence("0", 3)
    await a.update("0", offset="10", sequence_number=1)
    await b.fence("0", 4)
    with pytest.raises(errors.OwnershipLost) as caught:
        await a.update("0", offset="99", sequence_number=9)
    assert (caught.value.our_epoch, caught.value.their_epoch) == (3, 4)
    assert await metadata(blob_container, "0") == {
        "offset": "10",
        "sequencenumber": "1",
        "ownerid": "pod-b",
        "epoch": "4",
    }
    assert a.owned("0") is None


async def test_update_of_a_deleted_checkpoint_recreates_it(blob_container: Any) -> None:
    a = store(blob_container, "pod-a")
    await a.fence("0", 1)
    await blob_container.delete_blob(a.blob_name("0"))
    written = await a.update("0", offset="30", sequence_number=3)
    assert (written.sequence_number, written.epoch) == (3, 1)
    assert (await metadata(blob_container, "0"))["sequencenumber"] == "3"


async def test_update_after_an_unfenced_writer_restores_the_epoch_and_never_goes_back(
    blob_container: Any,
) -> None:
    a = store(blob_container, "pod-a")
    await a.fence("0", 2)
    await a.update("0", offset="10", sequence_number=1)
    # What the SDK's update_checkpoint does: overwrite the metadata, no condition, no epoch.
    await blob_container.get_blob_client(a.blob_name("0")).set_blob_metadata(
        {"offset": "900", "sequencenumber": "9"}
    )
    written = await a.update("0", offset="50", sequence_number=5)
    assert (written.sequence_number, written.offset, written.epoch) == (9, "900", 2)
    assert (await metadata(blob_container, "0"))["epoch"] == "2"


async def test_read_of_a_missing_checkpoint_is_none(blob_container: Any) -> None:
    assert await store(blob_container, "pod-a").read("0") is None


async def test_seed_creates_once_and_never_overwrites(blob_container: Any) -> None:
    a = store(blob_container, "pod-a")
    seeded = await a.seed("3", startpositions.FromSequenceNumber(sequence_number=100))
    assert (seeded.sequence_number, seeded.owner_id, seeded.epoch) == (99, "", 0)
    assert await metadata(blob_container, "3") == {"offset": "", "sequencenumber": "99"}
    await a.fence("3", 1)
    await a.update("3", offset="1", sequence_number=150)
    again = await a.seed("3", startpositions.EARLIEST)
    assert again.sequence_number == 150


async def test_list_sorts_partitions_and_skips_what_is_not_a_checkpoint(
    blob_container: Any,
) -> None:
    a = store(blob_container, "pod-a")
    for partition in ("10", "2", "0"):
        await a.fence(partition, 1)
        await a.update(partition, offset="1", sequence_number=int(partition))
    # Beside it: the SDK's ownership blobs and a stray blob without checkpoint metadata.
    await blob_container.upload_blob(
        "shop.servicebus.windows.net/orders/$default/ownership/0", b"", metadata={"ownerid": "x"}
    )
    await blob_container.upload_blob(
        "shop.servicebus.windows.net/orders/$default/checkpoint/junk", b""
    )
    listed = await a.list()
    assert [(c.partition, c.sequence_number) for c in listed] == [("0", 0), ("2", 2), ("10", 10)]
    assert all(c.last_modified is not None for c in listed)


async def test_a_missing_container_is_a_configuration_error(azurite: Any) -> None:
    from eventhub_balancer.adapters import blobs

    async with blobs.open_container(
        container_name="no-such-container", connection_string=azurite.connection_string
    ) as container:
        a = store(container, "pod-a")
        with pytest.raises(errors.ConfigurationError, match="does not exist"):
            await a.fence("0", 1)
        with pytest.raises(errors.ConfigurationError, match="does not exist"):
            await a.list()


async def test_a_sas_without_write_or_list_says_which_permission_is_missing(
    azurite: Any, blob_container: Any
) -> None:
    """Azurite checks a SAS's permissions as Azure does (403 AuthorizationPermissionMismatch)."""
    import datetime

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from eventhub_balancer.adapters import blobs
    from eventhub_balancer_devstack import azurite as azurite_launcher

    await store(blob_container, "pod-a").fence("0", 1)

    def sas_store(permission: ContainerSasPermissions) -> Any:
        token = generate_container_sas(
            azurite_launcher.ACCOUNT_NAME,
            blob_container.container_name,
            account_key=azurite_launcher.ACCOUNT_KEY,
            permission=permission,
            expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
        )
        return blobs.open_container(
            container_name=blob_container.container_name,
            connection_string=f"BlobEndpoint={azurite.endpoint};SharedAccessSignature={token}",
        )

    async with sas_store(ContainerSasPermissions(read=True, list=True)) as read_only:
        with pytest.raises(errors.ConfigurationError, match="sp=rcwl") as refused:
            await store(read_only, "pod-b").fence("0", 2)
        assert "AuthorizationPermissionMismatch" in str(refused.value)
        assert [c.epoch for c in await store(read_only, "pod-b").list()] == [1]
    async with sas_store(ContainerSasPermissions(read=True, create=True, write=True)) as no_list:
        with pytest.raises(errors.ConfigurationError, match="Storage Blob Data"):
            await store(no_list, "pod-b").list()
        assert (await store(no_list, "pod-b").fence("0", 2)).epoch == 2


async def test_an_expired_sas_says_so(azurite: Any, blob_container: Any) -> None:
    """Azurite answers an expired SAS with 403 AuthorizationFailure (Azure: 401/403
    AuthenticationFailed): either way the message names the expiry among what to check."""
    import datetime

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from eventhub_balancer.adapters import blobs
    from eventhub_balancer_devstack import azurite as azurite_launcher

    token = generate_container_sas(
        azurite_launcher.ACCOUNT_NAME,
        blob_container.container_name,
        account_key=azurite_launcher.ACCOUNT_KEY,
        permission=ContainerSasPermissions(read=True, create=True, write=True, list=True),
        expiry=datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5),
    )
    async with blobs.open_container(
        container_name=blob_container.container_name,
        connection_string=f"BlobEndpoint={azurite.endpoint};SharedAccessSignature={token}",
    ) as expired:
        with pytest.raises(errors.ConfigurationError, match="expired"):
            await store(expired, "pod-a").fence("0", 1)
