"""The checkpoint store on a throttled storage account: 503 ServerBusy and 500
OperationTimedOut answered in bursts (as an account over its request rate does), and answers
slower than one attempt's timeout, through the fault proxy in front of Azurite."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer.adapters import checkpointing, checkpointlistings, retrying
from eventhub_balancer.contracts import storeaddresses
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
