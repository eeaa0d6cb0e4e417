"""A receive position that Event Hubs refuses, on fake loop time (looptime).

Event Hubs refuses a receive link whose sequence number is past the partition's last event
(``com.microsoft:argument-error``: ``The supplied sequence number '12' is invalid. The last
sequence number in the system is '4'``). Reopening the link at the same position cannot mend
that, yet the receiver reopened it six times, over 15 s of WARNING lines, before it gave the
partition up with the SDK's text. Now the receiver ends at once with the service's words, and
the worker's restart (whose take-up moves a checkpoint past the end back) takes over.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from azure.eventhub import exceptions as eh_exceptions
from azure.eventhub._pyamqp import error as amqp

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, linkrefusals, receiving
from tests.support import sdkclients

pytestmark = pytest.mark.looptime

ADDRESS = receiving.EventHubAddress("shop.servicebus.windows.net", "orders")

#: Event Hubs' words for a sequence number past the end, with its tracking tail.
PAST_THE_END = (
    "The supplied sequence number '12' is invalid. The last sequence number in the system is "
    "'4' TrackingId:7a1f, SystemTracker:shop:eventhub:orders~32766|$default, Timestamp:2026-01-01"
)


async def nothing_until_it_fails(running: receiving.PartitionReceiver, *, within: float) -> None:
    async with asyncio.timeout(within):
        while True:
            assert (await running.next_batch(max_size=10, max_wait=0.1)).events == []


async def test_a_refused_position_ends_the_receiver_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    partition = sdkclients.FakePartition(count=5)
    monkeypatch.setattr(receiving, "make_client", sdkclients.FakeEventHub({"0": partition}).client)
    running = receiving.PartitionReceiver(
        address=ADDRESS, partition="0", epoch=3, position=deliveries.ReceivePosition.after(12)
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    running.start()
    try:
        with (
            caplog.at_level(logging.WARNING, logger=receiving.__name__),
            pytest.raises(errors.EventHubUnreachable) as raised,
        ):
            await nothing_until_it_fails(running, within=60)
    finally:
        await running.close()
    assert loop.time() - started < 1.0
    assert len(partition.opens) == 1  # never reopened
    assert str(raised.value) == (
        "partition 0: Event Hubs refused the receive position: "
        "The supplied sequence number '12' is invalid. The last sequence number in the system "
        "is '4'"
    )
    assert [r.getMessage() for r in caplog.records] == []


@pytest.mark.parametrize(
    "condition",
    [b"com.microsoft:argument-error", b"com.microsoft:argument-out-of-range"],
    ids=["argument-error", "argument-out-of-range"],
)
def test_both_argument_conditions_are_refused_positions(condition: bytes) -> None:
    error = amqp.AMQPLinkError(condition=condition, description=PAST_THE_END.encode())
    assert linkrefusals.position_refused(error) == (
        "The supplied sequence number '12' is invalid. The last sequence number in the system "
        "is '4'"
    )
    wrapped = eh_exceptions.ConnectionLostError(str(error), error)  # type: ignore[arg-type]
    assert linkrefusals.position_refused(wrapped) == linkrefusals.position_refused(error)


def test_other_refusals_are_not_refused_positions() -> None:
    stolen = amqp.AMQPLinkError(
        condition=amqp.ErrorCondition.LinkStolen.value, description=b"a higher epoch is open"
    )
    not_found = amqp.AMQPLinkError(
        condition=amqp.ErrorCondition.NotFound.value, description=b"could not be found"
    )
    for error in (stolen, not_found, ConnectionResetError("reset by peer")):
        assert linkrefusals.position_refused(error) is None
