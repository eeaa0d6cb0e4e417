"""`partitionbounds.locate_time`: where a time falls in a partition, decided by what Event
Hubs says and never by a silence, on fake loop time (looptime) against the SDK fakes of
``tests.support.sdkclients``.

Event ``n`` of a fake partition was enqueued at ``T0 + n`` s, so with 200 events the time
``T0 + 100 s`` falls on event 100. A receive link that opens slowly is waited for within its
own bound; one that does not deliver within it, that keeps failing, or that an old owner's
exclusive link refuses is `errors.EventHubUnreachable`, never "every event is older".
"""

from __future__ import annotations

import asyncio
import datetime

import pytest
from azure.eventhub import exceptions as eh_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import partitionbounds, receiving
from tests.support import sdkclients

pytestmark = pytest.mark.looptime

ADDRESS = receiving.EventHubAddress("local.servicebus.windows.net", "orders")
EVENTS = 200
AT_100 = sdkclients.enqueued_time(100)


def hub_with(monkeypatch: pytest.MonkeyPatch, partition: sdkclients.FakePartition) -> None:
    hub = sdkclients.FakeEventHub({"0": partition})
    monkeypatch.setattr(receiving, "make_client", hub.client)


def now() -> float:
    return asyncio.get_running_loop().time()


@pytest.mark.parametrize("open_delay", [6.0, 29.0])
async def test_a_slow_link_is_waited_for_within_its_own_bound(
    monkeypatch: pytest.MonkeyPatch, open_delay: float
) -> None:
    partition = sdkclients.FakePartition(EVENTS, open_delay=open_delay)
    hub_with(monkeypatch, partition)
    started = now()
    located = await partitionbounds.locate_time(ADDRESS, "0", AT_100)
    assert located.first_sequence_number == 100
    assert now() - started == pytest.approx(open_delay, abs=0.1)
    assert [level for _, level in partition.opens] == [None]  # no owner level: steals nothing


async def test_a_link_that_never_delivers_is_unreachable_after_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not "every event is older": the properties said event 199 is that recent."""
    hub_with(monkeypatch, sdkclients.FakePartition(EVENTS, open_delay=3600))
    started = now()
    with pytest.raises(errors.EventHubUnreachable, match="did not come within"):
        await partitionbounds.locate_time(ADDRESS, "0", AT_100)
    assert now() - started == pytest.approx(partitionbounds.FIRST_EVENT_TIMEOUT_S, abs=0.1)
    assert partitionbounds.FIRST_EVENT_TIMEOUT_S > receiving.LINK_OPEN_TIMEOUT_S


async def test_a_link_that_fails_and_reopens_in_time_still_finds_the_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reopened after 0.5 + 1 + 2 + 4 s of backoff, within the bound.
    partition = sdkclients.FakePartition(EVENTS, failing_opens=4)
    hub_with(monkeypatch, partition)
    located = await partitionbounds.locate_time(ADDRESS, "0", AT_100)
    assert located.first_sequence_number == 100
    assert len(partition.opens) == 5


async def test_a_link_that_keeps_failing_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    partition = sdkclients.FakePartition(EVENTS, failing_opens=1000)
    hub_with(monkeypatch, partition)
    with pytest.raises(errors.EventHubUnreachable, match="receiving failed 6 times"):
        await partitionbounds.first_sequence_at(ADDRESS, "0", AT_100)
    assert len(partition.opens) == receiving.REOPEN_ATTEMPTS


async def test_an_old_owners_exclusive_link_is_unreachable_not_a_lost_ownership(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The read has no owner level: a refusal is an owner still there, which passes."""
    partition = sdkclients.FakePartition(EVENTS, held_by_owner=True)
    hub_with(monkeypatch, partition)
    with pytest.raises(errors.EventHubUnreachable, match="exclusive link refuses the read"):
        await partitionbounds.locate_time(ADDRESS, "0", AT_100)
    partition.held_by_owner = False  # the old owner's link closed
    located = await partitionbounds.locate_time(ADDRESS, "0", AT_100)
    assert located.first_sequence_number == 100


@pytest.mark.parametrize(
    ("count", "when"),
    [
        (EVENTS, sdkclients.enqueued_time(EVENTS - 1) + datetime.timedelta(milliseconds=1)),
        (EVENTS, sdkclients.enqueued_time(EVENTS + 3600)),
        (0, sdkclients.T0),
    ],
    ids=["just-after-the-last", "an-hour-after-the-last", "empty"],
)
async def test_none_only_when_event_hubs_says_every_event_is_older(
    monkeypatch: pytest.MonkeyPatch, count: int, when: datetime.datetime
) -> None:
    partition = sdkclients.FakePartition(count, open_delay=3600)
    hub_with(monkeypatch, partition)
    located = await partitionbounds.locate_time(ADDRESS, "0", when)
    assert located.first_sequence_number is None
    assert located.bounds == partitionbounds.bounds_from(partition.properties())
    assert partition.opens == []  # decided by the properties: no link, no wait


async def test_the_last_event_at_the_time_exactly_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub_with(monkeypatch, sdkclients.FakePartition(EVENTS, open_delay=6.0))
    last = sdkclients.enqueued_time(EVENTS - 1)
    assert await partitionbounds.first_sequence_at(ADDRESS, "0", last) == EVENTS - 1


async def test_properties_without_a_last_enqueued_time_say_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event is read, and waited for as long as it may take."""
    partition = sdkclients.FakePartition(EVENTS, open_delay=6.0, tells_enqueued_time=False)
    hub_with(monkeypatch, partition)
    assert await partitionbounds.first_sequence_at(ADDRESS, "0", AT_100) == 100


class Unanswering:
    """A client whose properties call fails as the SDK's does against a closed port."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def get_partition_properties(self, partition: str) -> dict[str, object]:
        raise self.error

    async def close(self) -> None:
        """Nothing held."""


REFUSED = (
    "Failed to initiate the connection due to exception: [Errno 111] Connect call failed "
    "('127.0.0.1', 5679)\nError condition: ErrorCondition.SocketError\n Error Description: "
    "Failed to initiate the connection due to exception: [Errno 111] Connect call failed "
    "('127.0.0.1', 5679)"
)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            eh_exceptions.ConnectError(REFUSED),
            "partition 0: cannot read its properties from local.servicebus.windows.net: "
            "ConnectError: Failed to initiate the connection due to exception: [Errno 111] "
            "Connect call failed ('127.0.0.1', 5679)",
        ),
        (
            TimeoutError(),
            "partition 0: cannot read its properties from local.servicebus.windows.net: "
            "TimeoutError: no answer within 15 s",
        ),
    ],
    ids=["refused", "unanswered"],
)
async def test_unread_properties_say_where_from_and_what_failed(
    monkeypatch: pytest.MonkeyPatch, error: BaseException, said: str
) -> None:
    """A Secret rotated to a wrong endpoint had every partition of two pods report "cannot
    read its properties: ConnectError": the port refused was one `kubectl logs` away."""
    monkeypatch.setattr(receiving, "make_client", lambda address, **kw: Unanswering(error))
    with pytest.raises(errors.EventHubUnreachable) as caught:
        await partitionbounds.partition_bounds(ADDRESS, "0")
    assert str(caught.value) == said
    assert len(said) <= 200  # what a pod's report keeps
