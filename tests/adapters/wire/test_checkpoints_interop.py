"""Interoperability with the real peers: the SDK's BlobCheckpointStore and KEDA's blobMetadata.

The SDK (azure-eventhub-checkpointstoreblob-aio) is run for real against Azurite. KEDA is Go,
so its ``blobMetadata`` strategy is restated here from its source
(pkg/scalers/azure/azure_eventhub_checkpoint.go and azure_eventhub_scaler.go): the blob path
``<namespace>/<hub>/<lower(consumer group)>/checkpoint/<partition>``, the metadata key
``sequencenumber``, lag ``last_enqueued - sequencenumber`` and, without a blob, the whole
partition ``last_enqueued - beginning + 1``.
"""

from __future__ import annotations

from typing import Any

from azure.core import exceptions as azure_errors
from azure.eventhub.extensions.checkpointstoreblobaio import BlobCheckpointStore

from eventhub_balancer.adapters import checkpointing as cp
from eventhub_balancer.adapters import retrying
from eventhub_balancer.contracts import startpositions

NAMESPACE = "shop.servicebus.windows.net"
HUB = "orders"
GROUP = "$Default"


def ours(container: Any, owner: str = "pod-a") -> cp.CheckpointStore:
    return cp.CheckpointStore(
        container,
        fully_qualified_namespace=NAMESPACE,
        eventhub_name=HUB,
        consumer_group=GROUP,
        owner_id=owner,
        retry=retrying.RetryPolicy(seed=1),
    )


def sdk(azurite: Any, container: Any) -> BlobCheckpointStore:
    return BlobCheckpointStore.from_connection_string(
        azurite.connection_string, container.container_name
    )


async def keda_lag(container: Any, *, partition: str, beginning: int, last_enqueued: int) -> int:
    """KEDA's unprocessed-event count of a partition with ``checkpointStrategy: blobMetadata``."""
    if last_enqueued == -1:
        return 0  # an empty partition
    path = f"{NAMESPACE}/{HUB}/{GROUP.lower()}/checkpoint/{partition}"
    try:
        props = await container.get_blob_client(path).get_blob_properties()
    except azure_errors.ResourceNotFoundError:
        if (beginning == 0 and last_enqueued == 0) or beginning != last_enqueued:
            return last_enqueued - beginning + 1
        return 0
    sequence_number = int(props.metadata.get("sequencenumber", 0))
    if last_enqueued >= sequence_number:
        return last_enqueued - sequence_number
    return 0  # KEDA's wrap-around branch, clipped as stale partition info


async def test_sdk_lists_our_checkpoints(azurite: Any, blob_container: Any) -> None:
    store = ours(blob_container)
    for partition, (offset, sequence_number) in {"0": ("4096", 41), "1": ("128", 2)}.items():
        await store.fence(partition, 3)
        await store.update(partition, offset=offset, sequence_number=sequence_number)
    async with sdk(azurite, blob_container) as peer:
        listed = await peer.list_checkpoints(NAMESPACE, HUB, GROUP)
    assert sorted((c["partition_id"], c["offset"], c["sequence_number"]) for c in listed) == [
        ("0", "4096", 41),
        ("1", "128", 2),
    ]


async def test_sdk_processor_start_position_of_an_earliest_seed_is_the_partition_start(
    azurite: Any, blob_container: Any
) -> None:
    from azure.eventhub._eventprocessor._eventprocessor_mixin import EventProcessorMixin

    await ours(blob_container).fence("0", 1, start=startpositions.EARLIEST)
    async with sdk(azurite, blob_container) as peer:
        (checkpoint,) = await peer.list_checkpoints(NAMESPACE, HUB, GROUP)
    # The SDK's processor starts after the checkpoint's offset (exclusive): "-1" is the start.
    position, inclusive = EventProcessorMixin().get_init_event_position("0", checkpoint)
    assert (position, inclusive) == ("-1", False)


async def test_we_read_fence_and_continue_what_the_sdk_wrote(
    azurite: Any, blob_container: Any
) -> None:
    async with sdk(azurite, blob_container) as peer:
        await peer.claim_ownership(
            [
                {
                    "fully_qualified_namespace": NAMESPACE,
                    "eventhub_name": HUB,
                    "consumer_group": GROUP,
                    "partition_id": "0",
                    "owner_id": "sdk-processor",
                }
            ]
        )
        await peer.update_checkpoint(
            {
                "fully_qualified_namespace": NAMESPACE,
                "eventhub_name": HUB,
                "consumer_group": GROUP,
                "partition_id": "0",
                "offset": "8192",
                "sequence_number": 77,
            }
        )
        store = ours(blob_container)
        read = await store.read("0")
        assert read is not None
        assert (read.offset, read.sequence_number, read.owner_id, read.epoch) == ("8192", 77, "", 0)
        assert [c.partition for c in await store.list()] == ["0"]  # not the ownership blob
        fenced = await store.fence("0", 1)
        assert (fenced.offset, fenced.sequence_number, fenced.epoch) == ("8192", 77, 1)
        await store.update("0", offset="9000", sequence_number=80)
        (listed,) = await peer.list_checkpoints(NAMESPACE, HUB, GROUP)
        assert (listed["offset"], listed["sequence_number"]) == ("9000", 80)
        # The SDK's ownership record is untouched by us.
        (owner,) = await peer.list_ownership(NAMESPACE, HUB, GROUP)
        assert owner["owner_id"] == "sdk-processor"


async def test_keda_lag_from_our_checkpoints(blob_container: Any) -> None:
    store = ours(blob_container)
    # partition: (beginning, last enqueued) as Event Hubs would report them
    bounds = {"0": (0, 99), "1": (0, 49), "2": (0, 9), "3": (0, -1)}
    await store.fence("0", 1)
    await store.update("0", offset="x", sequence_number=89)  # 10 behind
    await store.fence("1", 1, start=startpositions.EARLIEST)  # nothing processed: all 50 behind
    # partition 2 has no checkpoint at all; partition 3 is empty
    lags = {
        p: await keda_lag(blob_container, partition=p, beginning=b, last_enqueued=last)
        for p, (b, last) in bounds.items()
    }
    assert lags == {"0": 10, "1": 50, "2": 10, "3": 0}


async def test_an_earliest_seed_gives_keda_the_same_lag_as_no_checkpoint(
    blob_container: Any,
) -> None:
    before = await keda_lag(blob_container, partition="5", beginning=0, last_enqueued=999)
    await ours(blob_container).seed("5", startpositions.EARLIEST)
    after = await keda_lag(blob_container, partition="5", beginning=0, last_enqueued=999)
    assert before == after == 1000
