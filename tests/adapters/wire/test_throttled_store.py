"""The checkpoint store on a throttled storage account: 503 ServerBusy and 500
OperationTimedOut answered in bursts (as an account over its request rate does), and answers
slower than one attempt's timeout, through the fault proxy in front of Azurite."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer.adapters import checkpointing, checkpointlistings
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
