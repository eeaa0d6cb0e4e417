"""The checkpoint store on a throttled storage account: 503 ServerBusy and 500
OperationTimedOut answered in bursts (as an account over its request rate does), and answers
slower than one attempt's timeout, through the fault proxy in front of Azurite."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import (
    checkpointing,
    checkpointlistings,
    deadletterreplays,
    deadletters,
    deliveries,
    retrying,
)
from eventhub_balancer.contracts import storeaddresses
from eventhub_balancer.reconciling import observations
from eventhub_balancer_devstack import azurite as azurite_launcher
from eventhub_balancer_devstack.faultproxy import FaultProxy

NAMESPACE = "throttled.servicebus.windows.net"


def address(fault_proxy: FaultProxy, container: Any) -> storeaddresses.StoreAddress:
    return storeaddresses.StoreAddress(
        fully_qualified_namespace=NAMESPACE,
        eventhub_name="hub",
        consumer_group="$default",
        container_name=container.container_name,
        connection_string=azurite_launcher.connection_string(
            host="127.0.0.1", port=fault_proxy.port
        ),
    )


@pytest.mark.parametrize("status", [503, 500])
async def test_a_short_throttle_does_not_fail_the_operators_listing(
    fault_proxy: FaultProxy, proxied_container: Any, status: int
) -> None:
    """A few requests refused in a row, within well under a second, is an account at its
    request rate: the listing behind CheckpointStoreReachable rides it out instead of turning
    it into CheckpointStoreUnreachable (a Warning Event, and no hand-off until the backoff)."""
    pod = checkpointing.CheckpointStore(
        proxied_container,
        fully_qualified_namespace=NAMESPACE,
        eventhub_name="hub",
        consumer_group="$default",
        owner_id="pod-a",
    )
    await pod.fence("0", 3)
    fault_proxy.faults.set(burst_throttled=3, throttle_status=status)
    listed = await checkpointlistings.read_checkpoints(address(fault_proxy, proxied_container))
    assert fault_proxy.faults.stats.throttled == 3
    assert listed["0"].epoch == 3
    fault_proxy.faults.set(burst_throttled=3, throttle_status=status)
    assert await checkpointlistings.read_claims(address(fault_proxy, proxied_container)) == {}
    assert fault_proxy.faults.stats.throttled == 6


async def test_answers_slower_than_an_attempts_timeout_still_complete_a_checkpoint(
    azurite: Any, fault_proxy: FaultProxy, proxied_container: Any
) -> None:
    """Each request takes effect at once, its answer comes after longer than one attempt may
    take (a loaded account): the write landed, so the update ends with it rather than
    spending the budget on retries that time out as well (the partition's worker would
    restart and hand its last batch to the handler again)."""
    retry = retrying.RetryPolicy(budget_seconds=4.0, attempt_timeout_seconds=0.5, seed=2)
    pod = checkpointing.CheckpointStore(
        proxied_container,
        fully_qualified_namespace=NAMESPACE,
        eventhub_name="hub",
        consumer_group="$default",
        owner_id="pod-a",
        retry=retry,
    )
    await pod.fence("0", 1)
    await pod.update("0", offset="10", sequence_number=10)
    fault_proxy.faults.set(answer_delay=0.7)
    written = await pod.update("0", offset="20", sequence_number=20)
    assert written.sequence_number == 20
    assert fault_proxy.faults.stats.slow_answers >= 2
    fault_proxy.faults.clear()
    assert (await pod.read("0")) == written


async def _dead_letter(container: Any) -> str:
    writer = deadletters.DeadLetterWriter(
        container, fully_qualified_namespace=NAMESPACE, eventhub_name="hub", consumer_group="$d"
    )
    event = deliveries.ReceivedEvent(
        partition="0",
        sequence_number=7,
        offset="70",
        enqueued_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        partition_key=None,
        properties={},
        body=b"order",
    )
    return await writer.write([event], error="ValueError: bad", attempts=3, pod="p", epoch=1)


def _reader(container: Any, *, timeout: float = 30.0) -> deadletterreplays.DeadLetterReader:
    return deadletterreplays.DeadLetterReader(
        container,
        fully_qualified_namespace=NAMESPACE,
        eventhub_name="hub",
        consumer_group="$d",
        timeout=timeout,
    )


async def test_a_replay_claims_and_marks_its_dead_letter_through_a_short_throttle(
    fault_proxy: FaultProxy, proxied_container: Any
) -> None:
    """`ehb deadletters replay` sends the events between its claim and its mark: one 503
    ServerBusy on the mark ended the command with the events sent, the blob claimed and not
    marked (a run again with --force would send them twice)."""
    name = await _dead_letter(proxied_container)
    reader = _reader(proxied_container)
    fault_proxy.faults.set(burst_throttled=2)
    assert [n for n, _ in await reader.names()] == [name]
    fault_proxy.faults.set(burst_throttled=2, throttle_status=500)
    fetched = await reader.fetch(name)
    fault_proxy.faults.set(burst_throttled=2)
    claim = await reader.claim(name, fetched, now=datetime.datetime.now(datetime.UTC))
    assert claim is not None
    fault_proxy.faults.set(burst_throttled=2)
    now = datetime.datetime.now(datetime.UTC)
    assert await reader.mark_replayed(name, to="hub", now=now, etag=claim)
    assert fault_proxy.faults.stats.throttled == 8
    listed = (await reader.list()).letters
    assert [(d.replayed_to, d.replaying_since) for d in listed] == [("hub", None)]


async def test_a_claim_whose_answer_came_too_late_is_still_ours(
    fault_proxy: FaultProxy, proxied_container: Any
) -> None:
    """The claim took effect, its answer came after the attempt's time: the retry is refused
    (the blob changed, by our claim), and the claim is found to be ours rather than
    another replay's."""
    name = await _dead_letter(proxied_container)
    reader = _reader(proxied_container, timeout=4.0)
    fetched = await reader.fetch(name)
    fault_proxy.faults.set(answer_delay=1.2)
    claim = await reader.claim(name, fetched, now=datetime.datetime.now(datetime.UTC))
    assert claim is not None
    fault_proxy.faults.clear()
    assert await reader.delete(name, etag=claim)
    assert await reader.names() == []


async def test_a_store_that_never_answers_is_named_by_its_container(
    fault_proxy: FaultProxy, proxied_container: Any
) -> None:
    """CheckpointStoreReachable showed ``list checkpoints under
    shop.servicebus.windows.net/orders/$default/checkpoint/: gave up ...``: the blobs' prefix,
    which reads as the Event Hubs namespace, and not the container."""
    fault_proxy.faults.set(status_5xx_rate=1.0, seed=1)
    for read in (checkpointlistings.read_checkpoints, checkpointlistings.read_claims):
        with pytest.raises(errors.CheckpointStoreUnreachable) as caught:
            await read(address(fault_proxy, proxied_container))
        message = str(caught.value)
        assert message.startswith(
            f"checkpoint container {proxied_container.container_name!r}: list "
        ), message
        assert "gave up after" in message
        # The status shows it without the attempts and seconds, which change every attempt.
        shown = observations.Fault.of(caught.value).message
        assert shown.startswith(f"checkpoint container {proxied_container.container_name!r}: ")
        assert "gave up, its budget of " in shown
