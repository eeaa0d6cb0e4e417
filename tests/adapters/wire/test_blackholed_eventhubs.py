"""A full blackhole: Event Hubs (or the network path to it) stops answering, and new
connections are accepted but never answered either (a load balancer whose back end is gone,
a TLS or AMQP handshake that gets no reply). Met by the pod's receiver and management calls
through the unmodified SDK, on a private emulator that blackholes on demand.

Every link open is bounded by `receiving.LINK_OPEN_TIMEOUT_S`, the SDK's own reconnect after
a hung connection's idle time-out included: the partition fails with
`errors.EventHubUnreachable` after its reopens, and a close while an open goes unanswered
returns. Before, the SDK's own reconnect waited for the handshake's answer for ever: the
partition was never reported failing. The time-outs are shortened here so that the tests take
seconds, not minutes; each bound below is what they add up to, with room for a loaded machine.

Every connection the SDK opened is closed once its client is given up, an opening cut short
included (`adapters.amqpcloses`): before, each unanswered open left its socket open for the
life of the pod, one more at every reopen (a pod of three partitions held 33 after a minute).
The emulator sees a connection close when the client's socket does.
"""

from __future__ import annotations

import asyncio

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import deliveries, eventhubs, partitionbounds, receiving
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from tests.adapters.wire.test_eventhubs_adapter import coordinates
from tests.support import eventhubclients as clients
from tests.support.consumerfakes import eventually

HUB = "blackholed"
#: The shortened idle time-out, link-open bound, reopens and backoff of these tests.
IDLE_S = 1.0
OPEN_S = 1.0
REOPENS = 2
BACKOFF_S = 0.1
#: The idle time-out (the SDK looks at it between reads, so up to a few seconds late), then
#: `REOPENS` unanswered opens and their backoff, with room for a loaded machine.
FAILING_BOUND_S = 15.0
#: A close while an open goes unanswered: the cancellation, then the SDK's close of a
#: connection that answers nothing (`receiving.PartitionReceiver._close_quietly`).
CLOSE_BOUND_S = 5.0
#: Once a client is given up, until the emulator sees its sockets closed (a turn or two of
#: both loops; the bound is room for a loaded machine).
CLOSED_BOUND_S = 5.0


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiving, "IDLE_TIMEOUT_S", IDLE_S)
    monkeypatch.setattr(receiving, "LINK_OPEN_TIMEOUT_S", OPEN_S)
    monkeypatch.setattr(receiving, "REOPEN_ATTEMPTS", REOPENS)
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_S", BACKOFF_S)
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_MAX_S", BACKOFF_S)
    monkeypatch.setattr(partitionbounds, "BOUNDS_TIMEOUT_S", OPEN_S)


def receiver(emu: EventHubsEmulator) -> receiving.PartitionReceiver:
    return receiving.PartitionReceiver(
        address=address(emu),
        partition="0",
        epoch=1,
        position=deliveries.ReceivePosition.earliest(),
    )


def address(emu: EventHubsEmulator) -> receiving.EventHubAddress:
    return receiving.EventHubAddress(
        emu.fully_qualified_namespace, HUB, connection_string=emu.connection_string()
    )


async def every_connection_closed(emu: EventHubsEmulator) -> None:
    """Every connection a client opened to ``emu`` is closed, within `CLOSED_BOUND_S`."""
    await eventually(
        lambda: emu.connection_count() == 0,
        within=CLOSED_BOUND_S,
        what="every connection the SDK opened closed",
    )


async def until_failed(running: receiving.PartitionReceiver, *, within: float) -> BaseException:
    """The error ``next_batch`` raises, within ``within`` seconds (else the test fails)."""
    try:
        async with asyncio.timeout(within):
            while True:
                await running.next_batch(max_size=100, max_wait=0.1)
    except TimeoutError:
        pytest.fail(f"the partition did not fail within {within} s of the blackhole")
    except Exception as e:
        return e


async def test_a_partition_whose_connection_and_every_new_one_go_unanswered_fails(
    private_eventhubs_emulator: EventHubsEmulator,
) -> None:
    emu = private_eventhubs_emulator
    emu.create_hub(HUB, 1)
    await clients.send(emu.connection_string(HUB), ["a", "b"], partition_id="0")
    running = receiver(emu)
    running.start()
    try:
        async with asyncio.timeout(clients.RECEIVE_TIMEOUT_S):
            batch = await running.next_batch(max_size=2, max_wait=clients.RECEIVE_TIMEOUT_S)
        assert [e.sequence_number for e in batch.events] == [0, 1]
        assert emu.blackhole() >= 1
        failed = await until_failed(running, within=FAILING_BOUND_S)
    finally:
        await running.close()
    assert isinstance(failed, errors.EventHubUnreachable)
    assert f"receiving failed {REOPENS} times in a row" in str(failed)
    assert "no answer to the partition's properties within" in str(failed)
    await every_connection_closed(emu)


async def test_a_partition_taken_up_while_nothing_answers_fails(
    private_eventhubs_emulator: EventHubsEmulator,
) -> None:
    emu = private_eventhubs_emulator
    emu.create_hub(HUB, 1)
    emu.blackhole()
    running = receiver(emu)
    running.start()
    try:
        failed = await until_failed(running, within=FAILING_BOUND_S)
    finally:
        await running.close()
    assert isinstance(failed, errors.EventHubUnreachable)
    assert f"did not open within {OPEN_S:g} s: Event Hubs did not answer" in str(failed)
    assert emu.connections_accepted() >= REOPENS
    await every_connection_closed(emu)


async def test_a_release_while_a_link_open_goes_unanswered_closes(
    private_eventhubs_emulator: EventHubsEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The open waits far longer than the close may: the close cuts it short.
    monkeypatch.setattr(receiving, "LINK_OPEN_TIMEOUT_S", 60.0)
    emu = private_eventhubs_emulator
    emu.create_hub(HUB, 1)
    emu.blackhole()
    running = receiver(emu)
    running.start()
    accepted = emu.connections_accepted()
    await eventually(
        lambda: emu.connections_accepted() > accepted,
        within=clients.RECEIVE_TIMEOUT_S,
        what="the link's connection",
    )
    try:
        async with asyncio.timeout(CLOSE_BOUND_S):
            await running.close()
    except TimeoutError:
        pytest.fail(f"the close did not return within {CLOSE_BOUND_S} s")
    await every_connection_closed(emu)


async def test_a_partitions_bounds_go_unanswered_and_fail(
    private_eventhubs_emulator: EventHubsEmulator,
) -> None:
    emu = private_eventhubs_emulator
    emu.create_hub(HUB, 1)
    emu.blackhole()
    with pytest.raises(errors.EventHubUnreachable, match="cannot read its properties"):
        async with asyncio.timeout(FAILING_BOUND_S):
            await partitionbounds.partition_bounds(address(emu), "0")
    await every_connection_closed(emu)


async def test_the_operators_reads_of_a_blackholed_hub_close_what_they_opened(
    private_eventhubs_emulator: EventHubsEmulator,
) -> None:
    # The operator's reads: on a client for the call alone, and on a kept client whose
    # management connection is kept between requests (`adapters.mgmtconnections`).
    emu = private_eventhubs_emulator
    emu.create_hub(HUB, 2)
    where = coordinates(emu, HUB)
    kept = eventhubs.Clients()
    try:
        assert await eventhubs.fetch_partition_ids(where, clients=kept) == ["0", "1"]
        emu.blackhole()
        for pool in (None, kept):  # not `clients`: the name of the test's client helpers
            with pytest.raises(errors.EventHubUnreachable):
                await eventhubs.fetch_last_sequence_numbers(
                    where, ["0", "1"], limit_seconds=OPEN_S, clients=pool
                )
    finally:
        await kept.close()
    assert emu.connections_accepted() >= 3
    await every_connection_closed(emu)
