"""The checkpoint blob format (names, metadata) and the retry policy: pure."""

import random
from typing import Any

import pytest
from azure.core import exceptions as azure_errors
from hypothesis import given
from hypothesis import strategies as st

from eventhub_balancer import errors
from eventhub_balancer.adapters import retrying
from eventhub_balancer.contracts import checkpointblobs


def test_blob_name_is_the_sdk_layout_lower_cased() -> None:
    name = checkpointblobs.blob_name(
        fully_qualified_namespace="Shop.ServiceBus.Windows.NET",
        eventhub_name="Orders",
        consumer_group="$Default",
        partition="7",
    )
    assert name == "shop.servicebus.windows.net/orders/$default/checkpoint/7"


def test_ownership_prefix_differs_from_checkpoint_prefix() -> None:
    kwargs = {"fully_qualified_namespace": "a", "eventhub_name": "b", "consumer_group": "c"}
    assert checkpointblobs.blob_prefix(**kwargs) == "a/b/c/checkpoint/"
    assert (
        checkpointblobs.blob_prefix(**kwargs, kind=checkpointblobs.OWNERSHIP) == "a/b/c/ownership/"
    )


def test_partition_of_takes_the_last_segment() -> None:
    assert checkpointblobs.partition_of("a/b/c/checkpoint/12") == "12"


def test_metadata_has_the_sdk_keys_and_ours() -> None:
    metadata = checkpointblobs.encode_metadata(
        position=checkpointblobs.Position(offset="4096", sequence_number=41),
        owner_id="pod-a",
        epoch=3,
    )
    assert metadata == {"offset": "4096", "sequencenumber": "41", "ownerid": "pod-a", "epoch": "3"}


def test_metadata_of_an_unowned_seed_has_only_the_sdk_keys() -> None:
    metadata = checkpointblobs.encode_metadata(
        position=checkpointblobs.NOTHING_PROCESSED_POSITION, owner_id="", epoch=0
    )
    assert metadata == {"offset": "-1", "sequencenumber": "-1"}


@given(
    offset=st.text(alphabet="0123456789:-", max_size=20),
    sequence_number=st.integers(min_value=-1, max_value=2**63 - 1),
    owner=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=63),
    epoch=st.integers(min_value=1, max_value=2**31),
)
def test_metadata_round_trips(offset: str, sequence_number: int, owner: str, epoch: int) -> None:
    position = checkpointblobs.Position(offset=offset, sequence_number=sequence_number)
    decoded = checkpointblobs.decode_metadata(
        checkpointblobs.encode_metadata(position=position, owner_id=owner, epoch=epoch)
    )
    assert decoded == checkpointblobs.StoredMetadata(position=position, owner_id=owner, epoch=epoch)


def test_sdk_written_metadata_decodes_as_epoch_zero_without_owner() -> None:
    decoded = checkpointblobs.decode_metadata({"offset": "100", "sequencenumber": "9"})
    assert decoded == checkpointblobs.StoredMetadata(
        position=checkpointblobs.Position(offset="100", sequence_number=9), owner_id="", epoch=0
    )


def test_empty_values_as_the_storage_listing_gives_them_decode_as_empty() -> None:
    """The storage SDK's listing gives an empty metadata value as None (a reset between a
    partition's first and last event writes an empty offset): it is the empty string, as read
    one blob at a time, and never a None in a position."""
    listed: dict[str, Any] = {"offset": None, "sequencenumber": "9", "ownerid": None, "epoch": "3"}
    decoded = checkpointblobs.decode_metadata(listed)
    assert decoded == checkpointblobs.StoredMetadata(
        position=checkpointblobs.Position(offset="", sequence_number=9), owner_id="", epoch=3
    )


def test_metadata_keys_match_case_insensitively_as_keda_does() -> None:
    decoded = checkpointblobs.decode_metadata({"Offset": "5", "Sequencenumber": "2"})
    assert decoded.position == checkpointblobs.Position(offset="5", sequence_number=2)


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"offset": "1"}, "sequencenumber"),
        ({"offset": "1", "sequencenumber": "x"}, "sequencenumber"),
        ({"offset": "1", "sequencenumber": "1", "epoch": "three"}, "epoch"),
    ],
)
def test_broken_metadata_names_the_field(metadata: dict[str, str], field: str) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        checkpointblobs.decode_metadata(metadata)
    assert caught.value.field == field


@given(failures=st.integers(min_value=1, max_value=40), seed=st.integers(0, 2**32))
def test_backoff_stays_within_the_exponential_ceiling(failures: int, seed: int) -> None:
    policy = retrying.RetryPolicy(base_delay_seconds=0.05, max_delay_seconds=2.0)
    delay = policy.backoff(failures=failures, rng=random.Random(seed))
    assert 0.0 <= delay <= min(2.0, 0.05 * 2 ** (failures - 1))


def test_backoff_is_reproducible_with_a_seed() -> None:
    policy = retrying.RetryPolicy(seed=7)
    first = [policy.backoff(failures=n, rng=random.Random(policy.seed)) for n in range(1, 6)]
    again = [policy.backoff(failures=n, rng=random.Random(policy.seed)) for n in range(1, 6)]
    assert first == again


def test_a_policy_without_attempts_is_refused() -> None:
    with pytest.raises(errors.InvalidInput):
        retrying.RetryPolicy(attempts=0)


def _http_error(status: int) -> azure_errors.HttpResponseError:
    error = azure_errors.HttpResponseError(message=f"status {status}")
    error.status_code = status
    return error


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_server_and_throttling_statuses_are_transient(status: int) -> None:
    assert retrying.is_transient(_http_error(status))


@pytest.mark.parametrize("status", [400, 403, 404, 409, 412])
def test_client_and_conflict_statuses_are_not_transient(status: int) -> None:
    assert not retrying.is_transient(_http_error(status))


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError(),
        ConnectionResetError(),
        azure_errors.ServiceRequestError("refused"),
        azure_errors.ServiceResponseError("server disconnected"),
    ],
)
def test_connection_failures_are_transient(error: BaseException) -> None:
    assert retrying.is_transient(error)


def test_ownership_lost_is_never_transient() -> None:
    assert not retrying.is_transient(errors.OwnershipLost("0", 3, 4))


def test_describe_names_status_and_code() -> None:
    error = _http_error(503)
    error.error_code = "ServerBusy"
    assert retrying.describe(error) == "HTTP 503 ServerBusy (HttpResponseError)"
    assert retrying.describe(TimeoutError()) == "timed out"
