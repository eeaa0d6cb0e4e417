"""On Azurite: a fencer that died holding the blob's lease never holds up the next owner.

The dead fencer's lease here lasts 60 s (Azure's longest fixed lease), and every takeover
must be done within a few seconds: it can only pass by breaking the lease, never by waiting
it out. The same rules run on fake time in ``tests/adapters/test_takeover.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing as cp
from eventhub_balancer.adapters import retrying

#: Far longer than any takeover may take: a takeover that waited it out fails the test.
DEAD_LEASE_S = 60
#: The bound of each takeover below, generous for a loaded machine.
BOUND_S = 5


def store(container: Any, owner: str) -> cp.CheckpointStore:
    return cp.CheckpointStore(
        container,
        fully_qualified_namespace="takeover.servicebus.windows.net",
        eventhub_name="hub",
        consumer_group="$default",
        owner_id=owner,
        retry=retrying.RetryPolicy(seed=1),
    )


async def die_mid_fence(container: Any, name: str) -> None:
    """Take the blob's lease and never release it, as a fencer killed mid-fence does."""
    await container.get_blob_client(name).acquire_lease(lease_duration=DEAD_LEASE_S)


async def test_a_higher_epoch_takes_over_from_a_dead_fencer(blob_container: Any) -> None:
    old, new = store(blob_container, "pod-old"), store(blob_container, "pod-new")
    await old.fence("0", 3)
    await old.update("0", offset="4096", sequence_number=41)
    await die_mid_fence(blob_container, old.blob_name("0"))

    async with asyncio.timeout(BOUND_S):
        taken = await new.fence("0", 4)
        written = await new.update("0", offset="4200", sequence_number=42)

    assert (taken.epoch, taken.sequence_number) == (4, 41)
    assert (written.epoch, written.sequence_number) == (4, 42)
    with pytest.raises(errors.OwnershipLost):
        await old.update("0", offset="9999", sequence_number=99)
    stored = await new.read("0")
    assert stored is not None
    assert (stored.epoch, stored.owner_id, stored.sequence_number) == (4, "pod-new", 42)


async def test_an_owner_unblocks_itself_from_a_dead_fencers_lease(blob_container: Any) -> None:
    owner = store(blob_container, "pod-new")
    await owner.fence("0", 4)
    await die_mid_fence(blob_container, owner.blob_name("0"))

    async with asyncio.timeout(BOUND_S):
        written = await owner.update("0", offset="100", sequence_number=1)

    assert (written.epoch, written.sequence_number) == (4, 1)


async def test_a_lower_epoch_is_still_refused_under_a_dead_lease(blob_container: Any) -> None:
    stale, owner = store(blob_container, "pod-stale"), store(blob_container, "pod-new")
    await stale.fence("0", 3)
    await owner.fence("0", 4)
    await die_mid_fence(blob_container, owner.blob_name("0"))

    async with asyncio.timeout(BOUND_S):
        with pytest.raises(errors.OwnershipLost):
            await stale.update("0", offset="1", sequence_number=1)
        with pytest.raises(errors.OwnershipLost):
            await stale.fence("0", 3)
    stored = await owner.read("0")
    assert stored is not None
    assert (stored.epoch, stored.owner_id, stored.sequence_number) == (4, "pod-new", -1)
