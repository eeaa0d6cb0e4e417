"""Start positions: the one model of ``spec.startPosition``, its JSON and its seeds. Pure."""

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventhub_balancer import errors
from eventhub_balancer.contracts import checkpointblobs, startpositions


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
        # RFC 3339 allows a lower-case t and z, and the API server admits them.
        (
            {"enqueuedTime": "2024-05-01t10:00:00z"},
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


def test_no_value_is_earliest_the_crd_default() -> None:
    assert startpositions.parse_start_position(None) == startpositions.EARLIEST


@pytest.mark.parametrize(
    ("position", "encoded"),
    [
        (startpositions.EARLIEST, '"earliest"'),
        (startpositions.LATEST, '"latest"'),
        (startpositions.FromSequenceNumber(sequence_number=5), '{"sequenceNumber":5}'),
        (
            startpositions.FromEnqueuedTime(
                enqueued_time=datetime.datetime(
                    2024,
                    5,
                    1,
                    12,
                    0,
                    0,
                    250_000,
                    tzinfo=datetime.timezone(datetime.timedelta(hours=2)),
                )
            ),
            '{"enqueuedTime":"2024-05-01T10:00:00Z"}',  # UTC with a Z, to the second
        ),
    ],
)
def test_configmap_json_is_the_crs_shape(
    position: startpositions.StartPosition, encoded: str
) -> None:
    assert startpositions.to_json(position) == encoded


@given(
    position=st.one_of(
        st.just(startpositions.EARLIEST),
        st.just(startpositions.LATEST),
        st.builds(startpositions.FromSequenceNumber, st.integers(min_value=0, max_value=2**63 - 1)),
        st.builds(
            startpositions.FromEnqueuedTime,
            st.datetimes(
                min_value=datetime.datetime(1970, 1, 2),
                timezones=st.just(datetime.UTC),
            ).map(lambda t: t.replace(microsecond=0)),
        ),
    )
)
def test_the_pod_reads_what_the_operator_writes(position: startpositions.StartPosition) -> None:
    body = startpositions.to_body(position)
    assert startpositions.parse_start_position(body) == position
