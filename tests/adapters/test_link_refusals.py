"""`linkrefusals`: what a refused or closed receive link means, read from the SDK's errors as
Event Hubs words them (pure: the SDK's own error types, built by hand)."""

from __future__ import annotations

import pytest
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub._pyamqp import error as amqp

from eventhub_balancer import errors
from eventhub_balancer.adapters import linkrefusals
from eventhub_balancer.contracts import partitionreports

#: Event Hubs' answer for a consumer group that does not exist (its entity ends in "|group").
AZURE_GROUP = (
    "The messaging entity 'shop:eventhub:orders~32766|analytics' could not be found. To know "
    "more visit https://aka.ms/sbResourceMgrExceptions. TrackingId:4f1c, SystemTracker:shop:"
    "eventhub:orders~32766|analytics, Timestamp:2026-11-29T04:00:00"
)
#: ... and for a hub that does not exist.
AZURE_HUB = (
    "The messaging entity 'sb://shop.servicebus.windows.net/nohub' could not be found. To know "
    "more visit https://aka.ms/sbResourceMgrExceptions. TrackingId:9a, Timestamp:2026-11-29"
)


def refusal(condition: amqp.ErrorCondition, description: str) -> amqp.AMQPLinkError:
    """The error as the SDK builds it from a detach frame: symbols arrive as bytes."""
    return amqp.AMQPLinkError(condition=condition.value, description=description.encode())


def test_a_group_refusal_is_consumer_group_not_found_in_its_own_words() -> None:
    error = refusal(amqp.ErrorCondition.NotFound, AZURE_GROUP)
    described = linkrefusals.not_found(error)
    assert described == (
        "The messaging entity 'shop:eventhub:orders~32766|analytics' could not be found."
    )
    missing = linkrefusals.missing(
        described,
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="analytics",
    )
    assert isinstance(missing, errors.ConsumerGroupNotFound)
    assert missing.reason == "ConsumerGroupNotFound"


def test_a_refusal_wrapped_by_the_sdk_is_read_through_the_wrapper() -> None:
    inner = refusal(amqp.ErrorCondition.NotFound, AZURE_GROUP)
    wrapped = eh_exceptions.ConnectionLostError(str(inner), inner)  # type: ignore[arg-type]
    assert linkrefusals.not_found(wrapped) == linkrefusals.not_found(inner)
    # Only the text left: the service's words after "Error Description:".
    text_only = RuntimeError(str(inner))
    assert linkrefusals.not_found(text_only) == linkrefusals.not_found(inner)


@pytest.mark.parametrize(
    ("group", "expected"),
    [("analytics", True), ("Analytics", True), ("$Default", False), ("analytic", False)],
)
def test_names_group_reads_the_entity(group: str, expected: bool) -> None:
    assert linkrefusals.names_group(AZURE_GROUP, group) is expected
    path = "The messaging entity 'sb://shop.servicebus.windows.net/orders/consumergroups/analytics'"
    assert linkrefusals.names_group(path, group) is expected


def test_a_hub_refusal_is_not_blamed_on_the_group_and_says_what_to_fix_first() -> None:
    """A pod's report keeps an error's first 200 characters, and the fix came after the
    service's words: ``ehb status`` showed "... could not be found in this emulator (hubs:
    orders)): fix spec.ev"."""
    described = linkrefusals.not_found(refusal(amqp.ErrorCondition.NotFound, AZURE_HUB))
    assert described is not None
    missing = linkrefusals.missing(
        described,
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="nohub",
        consumer_group="$Default",
    )
    assert type(missing) is errors.EventHubNotFound
    assert str(missing) == (
        "Event Hub 'nohub' in shop.servicebus.windows.net, or its consumer group '$Default', "
        "does not exist: fix spec.eventHub.name or spec.eventHub.consumerGroup (Event Hubs: "
        "The messaging entity 'sb://shop.servicebus.windows.net/nohub' could not be found.)"
    )
    assert "TrackingId" not in str(missing)
    kept = partitionreports.first_line(str(missing))
    assert "fix spec.eventHub.name or spec.eventHub.consumerGroup" in kept


def test_the_condition_as_the_sdks_enum_is_read_too() -> None:
    error = amqp.AMQPLinkError(condition=amqp.ErrorCondition.NotFound, description=AZURE_HUB)
    assert linkrefusals.not_found(error) is not None


def test_other_refusals_are_not_not_found() -> None:
    stolen = refusal(amqp.ErrorCondition.LinkStolen, "a receiver with a higher epoch is open")
    assert linkrefusals.not_found(stolen) is None
    assert linkrefusals.is_link_stolen(stolen)
    assert linkrefusals.not_found(ConnectionResetError("reset by peer")) is None
    assert not linkrefusals.is_link_stolen(ConnectionResetError("reset by peer"))


def test_a_refused_management_request_is_not_found_in_the_services_words() -> None:
    """``get_partition_properties`` of a hub that does not exist: the SDK builds its error
    from the status code and quotes the service's words after its own."""
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    sdk = PyamqpTransport._create_eventhub_exception(PyamqpTransport.get_error(404, AZURE_HUB))
    assert linkrefusals.not_found(sdk) == (
        "The messaging entity 'sb://shop.servicebus.windows.net/nohub' could not be found."
    )


def test_a_disabled_hub_is_unmendable_in_the_services_words() -> None:
    # The SDK keeps a vendor's condition as the bytes of the detach frame.
    error = amqp.AMQPLinkError(
        condition=b"com.microsoft:entity-disabled",
        description=b"Messaging entity 'shop:eventhub:orders' is currently disabled. To know "
        b"more visit https://aka.ms/sbResourceMgrExceptions. TrackingId:9a, Timestamp:2026-11-29",
    )
    final = linkrefusals.unmendable(
        error,
        partition="0",
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
    )
    assert isinstance(final, errors.EventHubNotFound)
    assert str(final) == (
        "Event Hub 'orders' in shop.servicebus.windows.net is disabled (Event Hubs: Messaging "
        "entity 'shop:eventhub:orders' is currently disabled.): set its status to Active, or "
        "fix spec.eventHub.name"
    )
