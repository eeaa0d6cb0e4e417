"""The checkpoint store's one retry loop, and its requests' answers, against fake blob clients.

`retrying.call_with_retries` decides what is sent again; `checkpointrequests.CheckpointBlobs`
turns the storage service's answers into values. Both are exercised here without Azurite: the
wire tests (``tests/adapters/wire``) run the same code against it and a fault proxy.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from azure.core import exceptions as azure_errors

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointrequests, retrying
from eventhub_balancer.contracts import checkpointblobs
from eventhub_balancer.reconciling import observations

pytestmark = pytest.mark.looptime

POSITION = checkpointblobs.Position(offset="10", sequence_number=3)


def budget(*, attempts: int = 5) -> retrying.Budget:
    policy = retrying.RetryPolicy(attempts=attempts, budget_seconds=60.0, seed=1)
    return retrying.Budget(policy=policy, rng=random.Random(1), operation="test op")


def http_error(
    status: int,
    code: str | None = None,
    kind: type[azure_errors.HttpResponseError] = azure_errors.HttpResponseError,
) -> azure_errors.HttpResponseError:
    error = kind(message=f"status {status}")
    error.status_code = status
    if code is not None:
        error.error_code = code
    return error


def answers(*outcomes: Any) -> tuple[Callable[[], Awaitable[Any]], list[int]]:
    """A request that raises or returns ``outcomes`` in turn, and the count of its calls."""
    calls: list[int] = []

    async def request() -> Any:
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return request, calls


async def test_transient_failures_are_retried_until_an_answer() -> None:
    request, calls = answers(http_error(503), ConnectionResetError(), "answer")
    assert await retrying.call_with_retries(budget(), request) == "answer"
    assert len(calls) == 3


async def test_a_refused_request_is_raised_as_store_unreachable_without_retry() -> None:
    request, calls = answers(http_error(400))
    with pytest.raises(errors.CheckpointStoreUnreachable, match="test op: the blob service"):
        await retrying.call_with_retries(budget(), request)
    assert len(calls) == 1


async def test_rejected_credentials_are_a_configuration_error() -> None:
    request, calls = answers(azure_errors.ClientAuthenticationError(message="no"))
    with pytest.raises(errors.CheckpointStoreRefused, match=r"rejected our credentials.*expired"):
        await retrying.call_with_retries(budget(), request)
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("AuthorizationPermissionMismatch", "Storage Blob Data Contributor"),
        ("AuthorizationPermissionMismatch", "sp=rcwl"),
        ("AuthorizationFailure", "firewall"),
        ("AuthorizationFailure", "expired"),
        ("AuthorizationResourceTypeMismatch", "srt=co"),
        ("AuthorizationServiceMismatch", "ss=b"),
        ("AuthorizationSourceIPMismatch", "IP range"),
        ("AuthorizationProtocolMismatch", "https://"),
        ("KeyBasedAuthenticationNotPermitted", "workload identity"),
        (None, "role assignment or SAS"),
    ],
)
async def test_a_forbidden_request_says_which_permission_to_grant(
    code: str | None, says: str
) -> None:
    """A role or SAS without write (or list) is refused with 403 at every attempt: it is a
    configuration to change, not an outage, and the message says what to change."""
    request, calls = answers(http_error(403, code))
    with pytest.raises(errors.CheckpointStoreRefused) as raised:
        await retrying.call_with_retries(budget(), request)
    message = str(raised.value)
    assert message.startswith("test op: ")
    # What every partition meeting it says alike: the same, without the operation.
    assert message == f"test op: {raised.value.cause}"
    assert "HTTP 403" in message
    assert says in message
    assert "\n" not in message
    assert len(calls) == 1


async def test_a_project_error_from_the_request_passes_as_it_is() -> None:
    mistake = errors.ConfigurationError("container missing")
    request, calls = answers(mistake)
    with pytest.raises(errors.ConfigurationError) as raised:
        await retrying.call_with_retries(budget(), request)
    assert raised.value is mistake
    assert len(calls) == 1


async def test_an_exhausted_budget_gives_up_with_the_last_error() -> None:
    request, calls = answers(*[http_error(503, "ServerBusy")] * 3)
    with pytest.raises(errors.CheckpointStoreUnreachable, match="gave up after 3") as raised:
        await retrying.call_with_retries(budget(attempts=3), request)
    assert isinstance(raised.value.__cause__, azure_errors.HttpResponseError)
    assert len(calls) == 3


async def test_a_spent_budget_says_its_cause_without_the_operation() -> None:
    # Each partition's report carries the cause (`consumer.restarts`): the same words for
    # every partition an outage stops, so that the operator says them once for all.
    causes = []
    for partition in ("0", "17"):
        request, _ = answers(*[http_error(503, "ServerBusy")] * 3)
        spent = retrying.Budget(
            policy=retrying.RetryPolicy(attempts=3, budget_seconds=60.0, seed=1),
            rng=random.Random(1),
            operation=f"checkpoint fence with epoch 3 of partition {partition} (h/c/{partition})",
        )
        with pytest.raises(errors.CheckpointStoreUnreachable) as raised:
            await retrying.call_with_retries(spent, request)
        assert f"partition {partition} (h/c/{partition}): gave up after 3" in str(raised.value)
        causes.append(raised.value.cause)
    assert (
        causes
        == [
            "gave up on the checkpoint store, a call's budget of 3 attempts spent; last error: "
            "HTTP 503 ServerBusy (HttpResponseError)"
        ]
        * 2
    )


class FakeBlob:
    """A blob client whose every method answers with the next of ``outcomes``."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[str] = []

    async def _answer(self, name: str) -> Any:
        self.calls.append(name)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def acquire_lease(self, **_: Any) -> Any:
        return await self._answer("acquire_lease")

    async def get_blob_properties(self) -> Any:
        return await self._answer("get_blob_properties")

    async def upload_blob(self, *_: Any, **__: Any) -> Any:
        return await self._answer("upload_blob")

    async def set_blob_metadata(self, *_: Any, **__: Any) -> Any:
        return await self._answer("set_blob_metadata")


class FakeContainer:
    container_name = "checkpoints"

    def __init__(self, blob: FakeBlob) -> None:
        self.blob = blob

    def get_blob_client(self, name: str) -> FakeBlob:
        return self.blob


def blobs(blob: FakeBlob) -> checkpointrequests.CheckpointBlobs:
    return checkpointrequests.CheckpointBlobs(
        FakeContainer(blob),
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        owner_id="pod-a",
    )


async def test_a_missing_blob_reads_as_none() -> None:
    blob = FakeBlob(http_error(404, "BlobNotFound", azure_errors.ResourceNotFoundError))
    assert await blobs(blob).get("0", budget()) is None
    assert blob.calls == ["get_blob_properties"]


async def test_a_missing_container_is_a_configuration_error_naming_it() -> None:
    blob = FakeBlob(http_error(404, "ContainerNotFound", azure_errors.ResourceNotFoundError))
    with pytest.raises(errors.ConfigurationError, match="'checkpoints' does not exist"):
        await blobs(blob).get("0", budget())
    assert blob.calls == ["get_blob_properties"]


async def test_creating_an_existing_blob_answers_none() -> None:
    blob = FakeBlob(http_error(409, "BlobAlreadyExists", azure_errors.ResourceExistsError))
    assert await blobs(blob).create("0", POSITION, 1, budget()) is None


async def test_a_created_blob_after_a_transient_failure_is_our_checkpoint() -> None:
    blob = FakeBlob(http_error(500), {"etag": '"e1"'})
    created = await blobs(blob).create("0", POSITION, 2, budget())
    assert created is not None
    assert (created.owner_id, created.epoch, created.etag) == ("pod-a", 2, '"e1"')
    assert created.position == POSITION
    assert blob.calls == ["upload_blob", "upload_blob"]


@pytest.mark.parametrize("status", [404, 412])
async def test_a_conditional_write_that_lost_its_race_answers_none(status: int) -> None:
    blob = FakeBlob(http_error(status, "ConditionNotMet"))
    assert await blobs(blob).write("0", POSITION, 1, '"e0"', budget()) is None
    assert blob.calls == ["set_blob_metadata"]


async def test_a_lease_held_by_another_fencer_answers_none() -> None:
    blob = FakeBlob(http_error(409, "LeaseAlreadyPresent", azure_errors.ResourceExistsError))
    assert await blobs(blob).acquire_lease("0", budget()) is None


async def test_a_lease_refused_for_another_reason_is_raised_as_ours() -> None:
    blob = FakeBlob(http_error(400, "InvalidHeaderValue"))
    with pytest.raises(errors.CheckpointStoreUnreachable, match="refused the request"):
        await blobs(blob).acquire_lease("0", budget())


async def test_a_spent_budget_shows_the_status_the_same_message_at_every_attempt() -> None:
    # The operator's CheckpointStoreReachable shows the fault of each failed listing: with the
    # attempts and seconds in it, every attempt rewrote the status though nothing had changed.
    shown = []
    for pace in (1.0, 1.5):  # a store that answers 503 after this long: the budget is time

        async def request(pace: float = pace) -> None:
            await asyncio.sleep(pace)
            raise http_error(503, "ServerBusy")

        spent = retrying.Budget(
            policy=retrying.RetryPolicy(seed=1), rng=random.Random(1), operation="test op"
        )
        with pytest.raises(errors.CheckpointStoreUnreachable) as raised:
            await retrying.call_with_retries(spent, request)
        assert f"gave up after {spent.attempts} attempt" in str(raised.value)  # the log's
        shown.append(observations.Fault.of(raised.value).message)
    assert shown[0] == shown[1]
    assert shown[0].startswith("test op: ")
    assert "last error: " in shown[0]
