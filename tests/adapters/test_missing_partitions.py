"""A receive link on a partition id the hub does not have (a hub deleted and created again
with fewer partitions), read from the SDK's errors.

Event Hubs refuses it with ``com.microsoft:argument-out-of-range``, one of the conditions it
also gives some refused start positions, and with words that name the partition: read as a
refused position, it sent people to reset checkpoints, which cannot help.
"""

from __future__ import annotations

import pytest
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub._pyamqp import error as amqp

from eventhub_balancer import errors
from eventhub_balancer.adapters import linkrefusals

#: Event Hubs' words for a partition id past the hub's last one, as clients have quoted them:
#: the parameter on a second line, then the tracking tail.
NO_SUCH_PARTITION = (
    "The specified partition is invalid for an EventHub partition sender or receiver. It "
    "should be between 0 and 1.\r\nParameter name: PartitionId TrackingId:ec3a_G4, "
    "SystemTracker:gateway5, Timestamp:2026-01-01T00:00:00"
)
PAST_THE_END = "The supplied sequence number '12' is invalid. The last sequence number is '4'"
OUT_OF_RANGE = "com.microsoft:argument-out-of-range"


def refusal(words: str, condition: str = OUT_OF_RANGE) -> amqp.AMQPLinkError:
    # A condition the SDK has no name for comes off the wire as bytes.
    return amqp.AMQPLinkError(condition=condition.encode(), description=words.encode())


def unmendable(error: BaseException, *, after_events: bool = False) -> object:
    return linkrefusals.unmendable(
        error,
        partition="3",
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        after_events=after_events,
    )


@pytest.mark.parametrize("after_events", [False, True])
@pytest.mark.parametrize("wrapped", [False, True])
def test_a_partition_the_hub_lacks_is_said_as_missing_in_the_services_words(
    wrapped: bool, after_events: bool
) -> None:
    error: BaseException = refusal(NO_SUCH_PARTITION)
    if wrapped:  # the SDK's text repeats the service's words: they are quoted once
        error = eh_exceptions.ConnectError(f"{NO_SUCH_PARTITION}\n{OUT_OF_RANGE}: {error}", error)  # type: ignore[arg-type]
    said = unmendable(error, after_events=after_events)
    assert isinstance(said, errors.EventHubUnreachable)
    text = str(said)
    assert text.startswith("partition 3 does not exist on Event Hub 'orders'"), text
    assert "checkpoint reset cannot mend it" in text
    assert text.count("It should be between 0 and 1.") == 1, text
    assert "position" not in text
    assert "TrackingId" not in text
    assert "PartitionId" not in text


def test_a_refused_position_under_the_same_condition_is_still_a_refused_position() -> None:
    for condition in linkrefusals.POSITION_REFUSALS:
        said = unmendable(refusal(PAST_THE_END, condition))
        assert "refused the receive position" in str(said), said
        assert linkrefusals.partition_missing(refusal(PAST_THE_END, condition)) is None


def test_the_missing_partition_words_need_the_condition() -> None:
    assert linkrefusals.partition_missing(refusal(NO_SUCH_PARTITION, "amqp:internal-error")) is None
