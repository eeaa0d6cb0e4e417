"""The checkpoint blob format (names, metadata), start positions and the retry policy: pure."""

import datetime
import random

import pytest
from azure.core import exceptions as azure_errors
from hypothesis import given
from hypothesis import strategies as st

from eventhub_balancer import errors
from eventhub_balancer.adapters import retrying, startpositions
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


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("earliest", startpositions.Earliest()),
        ("latest", startpositions.Latest()),
        ({"sequenceNumber": 0}, startpositions.FromSequenceNumber(sequence_number=0)),
        ({"sequenceNumber": 42}, startpositions.FromSequenceNumber(sequence_number=42)),
        (
            {"enqueuedTime": "2024-05-01T10:00:00Z"},
            startpositions.FromEnqueuedTime(
                enqueued_time=datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.UTC)
            ),
        ),
    ],
)
def test_start_positions_parse(value: object, expected: startpositions.StartPosition) -> None:
    assert startpositions.parse_start_position(value) == expected


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("oldest", "startPosition"),
        ({"sequenceNumber": -1}, "startPosition.sequenceNumber"),
        ({"sequenceNumber": True}, "startPosition.sequenceNumber"),
        ({"enqueuedTime": "yesterday"}, "startPosition.enqueuedTime"),
        ({"enqueuedTime": "2024-05-01T10:00:00"}, "startPosition.enqueuedTime"),
        ({"sequenceNumber": 1, "enqueuedTime": "2024-05-01T10:00:00Z"}, "startPosition"),
    ],
)
def test_bad_start_positions_name_the_field(value: object, field: str) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        startpositions.parse_start_position(value)
    assert caught.value.field == field


BOUNDS = startpositions.PartitionBounds(
    beginning_sequence_number=100, last_sequence_number=250, last_offset="8800", empty=False
)


@pytest.mark.parametrize(
    ("start", "bounds", "expected"),
    [
        (startpositions.EARLIEST, None, checkpointblobs.Position(offset="-1", sequence_number=-1)),
        (
            startpositions.EARLIEST,
            BOUNDS,
            checkpointblobs.Position(offset="-1", sequence_number=99),
        ),
        (
            startpositions.LATEST,
            BOUNDS,
            checkpointblobs.Position(offset="8800", sequence_number=250),
        ),
        (
            startpositions.FromSequenceNumber(sequence_number=0),
            None,
            checkpointblobs.Position(offset="-1", sequence_number=-1),
        ),
        (
            startpositions.FromSequenceNumber(sequence_number=10),
            None,
            checkpointblobs.Position(offset="", sequence_number=9),
        ),
    ],
)
def test_seed_positions_mean_last_processed(
    start: startpositions.StartPosition,
    bounds: startpositions.PartitionBounds | None,
    expected: checkpointblobs.Position,
) -> None:
    assert startpositions.seed_position(start, bounds=bounds) == expected


def test_keda_lag_of_an_earliest_seed_is_the_retained_partition() -> None:
    # KEDA: lag = last_enqueued - checkpoint sequencenumber.
    seeded = startpositions.seed_position(startpositions.EARLIEST, bounds=BOUNDS)
    assert BOUNDS.last_sequence_number - seeded.sequence_number == 151  # events 100..250


def test_latest_without_bounds_and_enqueued_time_need_the_caller() -> None:
    with pytest.raises(errors.ConfigurationError, match="last sequence number"):
        startpositions.seed_position(startpositions.LATEST)
    when = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    with pytest.raises(errors.ConfigurationError, match="resolve it"):
        startpositions.seed_position(startpositions.FromEnqueuedTime(enqueued_time=when))


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
