"""A dead or slow previous owner never holds up the new one, on fake time.

A fencer holds the checkpoint blob's lease for one read and one write; one killed in between
leaves it held for ``LEASE_SECONDS``. These tests run the store against an in-memory blob
with Azure's lease rules (``LeasedBlob``) and check that a higher epoch breaks such a lease
at once, that an owner's updates break a dead lower fencer's lease after a short grace, that
a live fencer is waited for, and that a lower epoch still never gets in. The retry budget is
a budget of time: what it waits on may take seconds. The same takeover runs against Azurite
in ``wire/test_checkpoints_takeover.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import types
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core import exceptions as azure_errors

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing as cp
from eventhub_balancer.adapters import checkpointrequests, retrying

pytestmark = pytest.mark.looptime

_etags = itertools.count(1)


def http_error(
    status: int,
    code: str,
    kind: type[azure_errors.HttpResponseError] = azure_errors.HttpResponseError,
) -> azure_errors.HttpResponseError:
    error = kind(message=f"{status} {code}")
    error.status_code = status
    error.error_code = code  # type: ignore[attr-defined]  # set by the SDK at run time
    return error


class Lease:
    def __init__(self, blob: LeasedBlob, lease_id: str) -> None:
        self.blob, self.id = blob, lease_id

    async def release(self) -> None:
        if self.blob.lease_id == self.id:
            self.blob.lease_id = None


class LeasedBlob:
    """One blob with Azure's rules for metadata writes, ETags and leases, on the loop's clock.

    It is also its own "generated client" (``_client.blob``), so that the SDK's
    ``BlobLeaseClient`` breaks its lease as it would a real blob's.
    """

    def __init__(self, name: str) -> None:
        self.blob_name = name
        self._client = types.SimpleNamespace(blob=self)
        self.metadata: dict[str, str] | None = None
        self.etag = ""
        self.lease_id: str | None = None
        self.lease_until = 0.0
        self.broken: set[str] = set()
        self.breaks = 0
        #: Leases acquired, and requests answered, since the start.
        self.leases = 0
        self.requests = 0
        self.writes: list[dict[str, str]] = []
        #: Extra latency of every request, to play a slow store.
        self.latency = 0.0

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _active_lease(self) -> str | None:
        if self.lease_id is not None and self._now() >= self.lease_until:
            self.lease_id = None  # expired
        return self.lease_id

    async def _delay(self) -> None:
        self.requests += 1
        await asyncio.sleep(self.latency)

    def _missing(self) -> azure_errors.HttpResponseError:
        return http_error(404, "BlobNotFound", azure_errors.ResourceNotFoundError)

    def _new_etag(self) -> str:
        self.etag = f'"0x{next(_etags):04d}"'
        return self.etag

    async def get_blob_properties(self) -> Any:
        await self._delay()
        if self.metadata is None:
            raise self._missing()
        state = "leased" if self._active_lease() else "available"
        return types.SimpleNamespace(
            metadata=dict(self.metadata),
            etag=self.etag,
            last_modified=None,
            lease=types.SimpleNamespace(state=state),
        )

    async def upload_blob(self, data: bytes, *, overwrite: bool, metadata: Any) -> Any:
        await self._delay()
        if self.metadata is not None and not overwrite:
            raise http_error(409, "BlobAlreadyExists", azure_errors.ResourceExistsError)
        self.metadata = dict(metadata)
        self.writes.append(dict(metadata))
        return {"etag": self._new_etag(), "last_modified": None}

    async def set_blob_metadata(
        self, metadata: Any, *, etag: str, match_condition: Any, lease: Any = None
    ) -> Any:
        await self._delay()
        if self.metadata is None:
            raise self._missing()
        held = self._active_lease()
        given = None if lease is None else getattr(lease, "id", lease)
        if given is not None and given in self.broken:
            raise http_error(409, "LeaseLost")
        if held is not None and given is None:
            raise http_error(412, "LeaseIdMissing")
        if held != given and given is not None:
            raise http_error(412, "LeaseIdMismatchWithBlobOperation")
        assert match_condition == MatchConditions.IfNotModified
        if etag != self.etag:
            raise http_error(412, "ConditionNotMet", azure_errors.ResourceModifiedError)
        self.metadata = dict(metadata)
        self.writes.append(dict(metadata))
        return {"etag": self._new_etag(), "last_modified": None}

    async def acquire_lease(self, *, lease_duration: int, lease_id: str | None = None) -> Lease:
        await self._delay()
        if self.metadata is None:
            raise self._missing()
        if self._active_lease() is not None:
            raise http_error(409, "LeaseAlreadyPresent", azure_errors.ResourceExistsError)
        self.lease_id = lease_id or f"lease-{next(_etags)}"
        self.lease_until = self._now() + lease_duration
        self.leases += 1
        return Lease(self, self.lease_id)

    async def break_lease(
        self, *, break_period: int, modified_access_conditions: Any, **_: Any
    ) -> Any:
        """The generated client's call that ``BlobLeaseClient.break_lease`` makes."""
        await self._delay()
        assert break_period == 0
        if self.metadata is None:
            raise self._missing()
        if_match = modified_access_conditions.if_match
        if if_match is not None and if_match != self.etag:
            raise http_error(412, "ConditionNotMet", azure_errors.ResourceModifiedError)
        held = self._active_lease()
        if held is None:
            raise http_error(409, "LeaseNotPresentWithLeaseOperation")
        self.broken.add(held)
        self.lease_id = None
        self.breaks += 1
        return {"lease_time": 0}

    def stored(self) -> tuple[int, str, int]:
        """(epoch, owner, sequence number) as stored."""
        assert self.metadata is not None
        return (
            int(self.metadata.get("epoch", 0)),
            self.metadata.get("ownerid", ""),
            int(self.metadata["sequencenumber"]),
        )


class Container:
    container_name = "checkpoints"

    def __init__(self) -> None:
        self.blobs: dict[str, LeasedBlob] = {}

    def get_blob_client(self, name: str) -> LeasedBlob:
        return self.blobs.setdefault(name, LeasedBlob(name))


def store(container: Container, owner: str) -> cp.CheckpointStore:
    return cp.CheckpointStore(
        container,
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        owner_id=owner,
        retry=retrying.RetryPolicy(seed=3),
    )


def now() -> float:
    return asyncio.get_running_loop().time()


async def killed_mid_fence(blob: LeasedBlob) -> None:
    """What a fencer killed between its lease and its release leaves: a held 15 s lease."""
    await blob.acquire_lease(lease_duration=checkpointrequests.LEASE_SECONDS)


async def test_a_higher_epoch_breaks_a_dead_fencers_lease_at_once() -> None:
    container = Container()
    old, new = store(container, "pod-old"), store(container, "pod-new")
    await old.fence("0", 3)
    await old.update("0", offset="100", sequence_number=10)
    blob = container.get_blob_client(old.blob_name("0"))
    await killed_mid_fence(blob)  # e.g. a pod given epoch 4 that died while fencing

    started = now()
    taken = await new.fence("0", 5)
    await new.update("0", offset="110", sequence_number=11)
    took = now() - started

    assert took < 1.0
    assert (taken.epoch, taken.sequence_number) == (5, 10)
    assert blob.stored() == (5, "pod-new", 11)
    assert blob.breaks == 1


async def test_a_lower_epoch_never_breaks_in() -> None:
    container = Container()
    owner, stale = store(container, "pod-new"), store(container, "pod-stale")
    await stale.fence("0", 3)
    await owner.fence("0", 4)
    blob = container.get_blob_client(owner.blob_name("0"))
    await killed_mid_fence(blob)

    with pytest.raises(errors.OwnershipLost):
        await stale.fence("0", 3)
    with pytest.raises(errors.InvalidInput, match="call fence"):
        await stale.update("0", offset="1", sequence_number=1)
    assert blob.breaks == 0
    assert blob.stored() == (4, "pod-new", -1)


async def test_a_stale_owners_update_never_lands_even_after_a_break() -> None:
    container = Container()
    stale, owner = store(container, "pod-stale"), store(container, "pod-new")
    await stale.fence("0", 3)
    await owner.fence("0", 4)
    await owner.update("0", offset="50", sequence_number=5)
    blob = container.get_blob_client(owner.blob_name("0"))
    await killed_mid_fence(blob)

    with pytest.raises(errors.OwnershipLost):
        await stale.update("0", offset="90", sequence_number=9)
    assert blob.breaks == 0  # the blob is not its own epoch: nothing of its to unblock
    await owner.update("0", offset="60", sequence_number=6)
    assert blob.stored() == (4, "pod-new", 6)


async def test_an_owners_update_breaks_a_dead_fencers_lease_after_a_short_grace() -> None:
    container = Container()
    owner = store(container, "pod-new")
    await owner.fence("0", 4)
    blob = container.get_blob_client(owner.blob_name("0"))
    await killed_mid_fence(blob)  # a lower epoch's fencer that died before its release

    started = now()
    await owner.update("0", offset="70", sequence_number=7)
    took = now() - started

    assert cp.LEASE_BREAK_AFTER_S <= took < 1.0
    assert blob.stored() == (4, "pod-new", 7)
    assert blob.breaks == 1


async def test_a_live_fencer_is_waited_for_and_wins() -> None:
    container = Container()
    owner, fencer = store(container, "pod-old"), store(container, "pod-next")
    await owner.fence("0", 4)
    await owner.update("0", offset="10", sequence_number=1)
    blob = container.get_blob_client(owner.blob_name("0"))
    blob.latency = 0.05  # a slow store: each request takes 50 ms

    async def checkpoint_back_to_back() -> int:
        for n in range(2, 200):
            try:
                await owner.update("0", offset=str(n * 10), sequence_number=n)
            except errors.OwnershipLost:
                return n
        raise AssertionError("the old owner was never fenced out")

    async def take_over() -> None:
        await asyncio.sleep(0.2)
        await fencer.fence("0", 5)

    async with asyncio.timeout(30):
        last, _ = await asyncio.gather(checkpoint_back_to_back(), take_over())
    epoch, owner_id, _ = blob.stored()
    assert (epoch, owner_id) == (5, "pod-next")
    assert blob.breaks == 0
    assert blob.leases >= 1  # its unleased write lost to an update: then under a lease
    assert last < 50


async def test_a_handoff_takes_the_blob_over_with_one_read_and_one_write() -> None:
    # The old owner wrote its final checkpoint and released: nobody races the next owner, which
    # needs no lease (three more round trips on every take-up of a partition).
    container = Container()
    old, new = store(container, "pod-old"), store(container, "pod-new")
    await old.fence("0", 4)
    await old.update("0", offset="10", sequence_number=1)
    old.release("0")
    blob = container.get_blob_client(old.blob_name("0"))
    before, leases = blob.requests, blob.leases

    taken = await new.fence("0", 5)

    assert blob.requests - before == 2
    assert blob.leases == leases
    assert (taken.epoch, taken.sequence_number) == (5, 1)
    assert blob.stored() == (5, "pod-new", 1)
    with pytest.raises(errors.OwnershipLost):
        await old.fence("0", 4)


async def test_a_lease_held_on_the_blob_sends_the_fence_under_a_lease_of_its_own() -> None:
    # A fencer of a lower epoch died holding the lease: the unleased write is refused
    # (LeaseIdMissing), and the takeover breaks that lease at once, as before.
    container = Container()
    owner, fencer = store(container, "pod-old"), store(container, "pod-next")
    await owner.fence("0", 4)
    blob = container.get_blob_client(owner.blob_name("0"))
    await killed_mid_fence(blob)
    started = now()

    taken = await fencer.fence("0", 5)

    assert now() - started < 1.0
    assert taken.epoch == 5
    assert blob.stored()[:2] == (5, "pod-next")
    assert blob.breaks == 1


async def test_conflicts_are_retried_for_the_budgets_time_not_a_count() -> None:
    policy = retrying.RetryPolicy(seed=1)
    budget = retrying.Budget(policy=policy, rng=random.Random(1), operation="test op")
    started = now()

    async def lost_race() -> None:
        return None

    async def keep_losing() -> None:
        async with asyncio.timeout(policy.budget_seconds * 10):
            while True:
                await budget.call(lost_race)
                await budget.after_conflict("412 ConditionNotMet")

    with pytest.raises(errors.CheckpointStoreUnreachable, match="gave up after"):
        await keep_losing()
    assert now() - started >= policy.budget_seconds * 0.9
    assert budget.attempts <= policy.attempts


async def test_a_store_busy_for_twelve_seconds_is_waited_out() -> None:
    policy = retrying.RetryPolicy(seed=1)
    budget = retrying.Budget(policy=policy, rng=random.Random(1), operation="test op")
    busy_until = now() + 12.0

    async def request() -> str:
        if now() < busy_until:
            raise http_error(503, "ServerBusy")
        return "answer"

    async with asyncio.timeout(60):
        assert await retrying.call_with_retries(budget, request) == "answer"
    assert budget.attempts <= policy.attempts


async def test_a_fence_repeated_by_its_owner_is_said_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A partition restarted after a failure fences again with the epoch it holds: every
    # restart of an outage said at INFO made two lines a partition a round, with the take-up's.
    caplog.set_level(logging.DEBUG, logger=cp.logger.name)
    owner = store(Container(), "pod-a")
    await owner.fence("0", 3)
    await owner.fence("0", 3)
    await owner.fence("0", 4)
    fences = [(r.levelname, r.getMessage()) for r in caplog.records if "fenced" in r.getMessage()]
    assert fences == [
        ("INFO", "partition 0: fenced with epoch 3 at sequence number -1"),
        ("DEBUG", "partition 0: fenced with epoch 3 at sequence number -1"),
        ("INFO", "partition 0: fenced with epoch 4 at sequence number -1"),
    ]
